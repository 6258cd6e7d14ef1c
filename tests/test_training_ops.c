/* Training kernels (runtime/ops/training*.c) and optimizer math (runtime/optim.c).
 *
 * Gradient kernels are checked against central finite differences of the forward kernel they
 * differentiate, each run as a one-node otter_session built with the IR API: for a loss
 * L = sum(Y * R) with a fixed random R, the gradient kernel gets dY = R and every element of
 * every differentiated input is compared with (L(x + e) - L(x - e)) / 2e, L accumulated in double.
 * e = 1e-2 (1e-3 where the function curves sharply), |fd - kernel| <= tol * (1 + |fd|) with tol
 * stated per case (2e-3 unless noted: float32 forward kernels). Kinks are avoided: Relu inputs
 * keep |x| >= 0.1, MaxPool inputs are distinct values at least 0.05 apart.
 * Optimizers are checked against the spec's formulas evaluated here in double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "otter/ir.h"
#include "otter/runtime.h"
#include "runtime/ops/conv_direct.h"
#include "runtime/optim.h"
#include "testutil.h"

#define MS  "com.microsoft"
#define PRV "ai.onnx.preview.training"

/* ---- helpers ------------------------------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* [0, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

static otter_tensor *tf(int rank, const int64_t *dims, const float *vals) {
    otter_tensor *t = NULL;
    if (otter_tensor_create(&t, NULL, OTTER_DTYPE_FLOAT, rank, dims) != OTTER_OK) abort();
    if (vals) memcpy(t->data, vals, otter_tensor_nbytes(t));
    return t;
}
/* Uniform in [lo, hi). */
static otter_tensor *trand(int rank, const int64_t *dims, double lo, double hi) {
    otter_tensor *t = tf(rank, dims, NULL);
    float *d = t->data;
    for (int64_t i = 0; i < otter_tensor_numel(t); i++) d[i] = (float)(lo + (hi - lo) * urand());
    return t;
}
static otter_tensor *ti64(int rank, const int64_t *dims, const int64_t *vals) {
    otter_tensor *t = NULL;
    if (otter_tensor_create(&t, NULL, OTTER_DTYPE_INT64, rank, dims) != OTTER_OK) abort();
    if (vals) memcpy(t->data, vals, otter_tensor_nbytes(t));
    return t;
}
static otter_tensor *tbool(int rank, const int64_t *dims, const uint8_t *vals) {
    otter_tensor *t = NULL;
    if (otter_tensor_create(&t, NULL, OTTER_DTYPE_BOOL, rank, dims) != OTTER_OK) abort();
    memcpy(t->data, vals, otter_tensor_nbytes(t));
    return t;
}
static otter_tensor *tshape(const otter_tensor *like) {
    int64_t n = like->rank;
    return ti64(1, &n, like->dims);
}
static float *F(const otter_tensor *t) { return t->data; }

/* A node with inputs named i0.. ("" where skip[k]) and outputs o0.. ("" where out_skip). */
static otter_node *mknode(const char *op, const char *domain, int n_in, unsigned skip_mask, int n_out,
                          unsigned out_skip_mask) {
    char in_names[16][8], out_names[16][8];
    const char *ip[16], *op_[16];
    for (int i = 0; i < n_in; i++) {
        snprintf(in_names[i], sizeof in_names[i], "i%d", i);
        ip[i] = (skip_mask >> i) & 1 ? "" : in_names[i];
    }
    for (int i = 0; i < n_out; i++) {
        snprintf(out_names[i], sizeof out_names[i], "o%d", i);
        op_[i] = (out_skip_mask >> i) & 1 ? "" : out_names[i];
    }
    otter_node *n = NULL;
    if (otter_node_create(&n, op, op, (size_t)n_in, ip, (size_t)n_out, op_) != OTTER_OK) abort();
    if (domain) otter_node_set_domain(n, domain);
    return n;
}

/* Optional value_info for output o0 (rank -1: none; dims < 0 become symbols). */
static int vi_rank = -1;
static int64_t vi_dims[8];
/* Threads of the sessions run_node creates. */
static int run_threads = 1, run_opt_level = 0;

/* Run a clone of node in a one-node model (default opset `opset`): in[k] feeds input k (NULL for an
 * omitted one), out[k] receives output k (NULL slots are not fetched). Returns the status. */
static otter_status run_node(const otter_node *node, int opset, int n_in, otter_tensor *const *in, int n_out,
                             otter_tensor **out) {
    otter_model *m = NULL;
    otter_session *s = NULL;
    otter_node *n = NULL;
    otter_status st = otter_model_create(&m, "t", opset);
    if (st == OTTER_OK) st = otter_model_set_opset(m, MS, 1);
    if (st == OTTER_OK) st = otter_model_set_opset(m, PRV, 1);
    if (st == OTTER_OK) st = otter_model_set_opset(m, "com.otter", 1);
    for (int k = 0; k < n_in && st == OTTER_OK; k++)
        if (in[k] && node->inputs[k][0])
            st = otter_graph_add_input(m->graph, node->inputs[k], in[k]->dtype, in[k]->rank, in[k]->dims, NULL);
    const char *names[16];
    otter_tensor **outs[16];
    int nf = 0;
    for (int k = 0; k < n_out && st == OTTER_OK; k++) {
        if (!out[k] && k < (int)node->n_outputs && node->outputs[k][0]) {
            /* fetch every named output; out slots that are NULL get a new tensor */
        }
        if (k < (int)node->n_outputs && node->outputs[k][0]) {
            st = otter_graph_add_output(m->graph, node->outputs[k], OTTER_DTYPE_UNDEFINED, -1, NULL, NULL);
            names[nf] = node->outputs[k];
            outs[nf++] = &out[k];
        }
    }
    if (st == OTTER_OK && vi_rank >= 0) {
        otter_type t;
        const char *params[8] = {"b0", "b1", "b2", "b3", "b4", "b5", "b6", "b7"};
        memset(&t, 0, sizeof t);
        st = otter_type_set_tensor(&t, OTTER_DTYPE_FLOAT, vi_rank, vi_dims, params);
        if (st == OTTER_OK) st = otter_graph_add_value_info(m->graph, node->outputs[0], &t);
        otter_type_clear(&t);
    }
    if (st == OTTER_OK) st = otter_node_clone(&n, node);
    if (st == OTTER_OK) st = otter_graph_add_node(m->graph, n);
    otter_session_options o = {
        .n_threads = run_threads, .opt_level = run_opt_level, .opt_level_set = true, .no_fold_initializers = true};
    if (st == OTTER_OK) st = otter_session_create(&s, m, &o);
    const char *in_names[16];
    const otter_tensor *in_t[16];
    int ni = 0;
    for (int k = 0; k < n_in; k++)
        if (in[k] && node->inputs[k][0]) in_names[ni] = node->inputs[k], in_t[ni++] = in[k];
    otter_tensor *res[16] = {0};
    if (st == OTTER_OK) st = otter_session_run(s, (size_t)ni, in_names, in_t, (size_t)nf, names, res);
    for (int k = 0; k < nf; k++) {
        if (st == OTTER_OK) {
            otter_tensor_free(*outs[k]);
            *outs[k] = res[k];
        } else {
            otter_tensor_free(res[k]);
        }
    }
    otter_session_free(s);
    otter_model_free(m);
    return st;
}

static void free_all(int n, otter_tensor **t) {
    for (int i = 0; i < n; i++) otter_tensor_free(t[i]), t[i] = NULL;
}

/* L = sum(out0 * R) of the forward node, in double. */
static double fwd_loss(const otter_node *fwd, int opset, int n_in, otter_tensor *const *in, const otter_tensor *R) {
    otter_tensor *out[4] = {0};
    if (run_node(fwd, opset, n_in, in, 1, out) != OTTER_OK) {
        fprintf(stderr, "forward %s failed: %s\n", fwd->op_type, otter_last_error());
        return NAN;
    }
    double l = 0;
    for (int64_t i = 0; i < otter_tensor_numel(out[0]); i++) l += (double)F(out[0])[i] * F(R)[i];
    otter_tensor_free(out[0]);
    return l;
}

/* Compare grad (the kernel's gradient for forward input k) with central differences. */
static void check_fd(const char *what, const otter_node *fwd, int opset, int n_in, otter_tensor *const *in, int k,
                     const otter_tensor *R, const otter_tensor *grad, double eps, double tol) {
    tu_checks++;
    if (!grad || otter_tensor_numel(grad) != otter_tensor_numel(in[k])) {
        tu_failures++;
        fprintf(stderr, "%s: gradient for input %d missing or of the wrong size\n", what, k);
        return;
    }
    double worst = 0;
    int64_t worst_i = -1;
    float *x = F(in[k]);
    for (int64_t i = 0; i < otter_tensor_numel(in[k]); i++) {
        float x0 = x[i];
        x[i] = (float)(x0 + eps);
        double lp = fwd_loss(fwd, opset, n_in, in, R);
        x[i] = (float)(x0 - eps);
        double lm = fwd_loss(fwd, opset, n_in, in, R);
        x[i] = x0;
        double fd = (lp - lm) / (2 * eps), w = tu_worse(worst, fabs(fd - F(grad)[i]) / (1 + fabs(fd)));
        if (!isnan(worst) && w != worst) worst_i = i; /* the largest error's element, or the first NaN's */
        worst = w;
    }
    bool ok = worst <= tol;
    if (!ok) {
        tu_failures++;
        fprintf(stderr, "%s: FAIL at element %lld: kernel %g\n", what, (long long)worst_i,
                worst_i >= 0 ? F(grad)[worst_i] : 0.0);
    }
    printf("  %-58s %5lld elements, worst rel err %.2e (tol %.0e)\n", what, (long long)otter_tensor_numel(in[k]), worst,
           tol);
}

static void check_close(const char *what, const otter_tensor *got, const double *want, int64_t n, double tol) {
    tu_checks++;
    if (!got || otter_tensor_numel(got) != n) {
        tu_failures++;
        fprintf(stderr, "%s: missing or wrong size\n", what);
        return;
    }
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = got->dtype == OTTER_DTYPE_FLOAT ? F(got)[i] : ((double *)got->data)[i];
        worst = tu_worse(worst, fabs(v - want[i]) / (1 + fabs(want[i])));
    }
    if (!(worst <= tol)) {
        tu_failures++;
        fprintf(stderr, "%s: FAIL worst rel err %g\n", what, worst);
    }
    printf("  %-58s %5lld values,   worst rel err %.2e (tol %.0e)\n", what, (long long)n, worst, tol);
}

/* ---- accumulators --------------------------------------------------------------------------------- */

static void test_accumulators(void) {
    printf("accumulators:\n");
    int64_t d[2] = {2, 3}, one = 1;
    float b0[6] = {1, 2, 3, 4, 5, 6}, v0[6] = {0.5f, -1, 2, 0, 1, -6};
    otter_tensor *buf = tf(2, d, b0), *val = tf(2, d, v0);
    uint8_t f = 0, t = 1;
    otter_tensor *no = tbool(1, &one, &f), *yes = tbool(1, &one, &t);
    otter_node *n = mknode("InPlaceAccumulatorV2", MS, 3, 0, 2, 0);
    otter_tensor *in[3] = {buf, val, no}, *out[2] = {0};
    CHECK_OK(run_node(n, 17, 3, in, 2, out));
    double acc[6], ovw[6];
    for (int i = 0; i < 6; i++) acc[i] = b0[i] + v0[i], ovw[i] = v0[i];
    check_close("InPlaceAccumulatorV2 accumulate: buffer changed in place", buf, acc, 6, 0);
    check_close("InPlaceAccumulatorV2 accumulate: accumulation_buffer_out", out[1], acc, 6, 0);
    CHECK(out[0] && out[0]->dtype == OTTER_DTYPE_BOOL && out[0]->rank == 1 && ((uint8_t *)out[0]->data)[0] == 1);
    free_all(2, out);
    in[2] = yes;
    CHECK_OK(run_node(n, 17, 3, in, 2, out));
    check_close("InPlaceAccumulatorV2 overwrite: buffer = value", buf, ovw, 6, 0);
    free_all(2, out);
    /* no overwrite flag: accumulate; only the flag output named */
    otter_node_free(n);
    n = mknode("InPlaceAccumulatorV2", MS, 2, 0, 1, 0);
    CHECK_OK(run_node(n, 17, 2, in, 1, out));
    for (int i = 0; i < 6; i++) acc[i] = 2.0 * v0[i];
    check_close("InPlaceAccumulatorV2 without flag accumulates", buf, acc, 6, 0);
    free_all(1, out);
    otter_node_free(n);
    /* size mismatch: an error naming the node */
    int64_t d2 = 5;
    otter_tensor *bad = trand(1, &d2, 0, 1);
    in[1] = bad;
    n = mknode("InPlaceAccumulatorV2", MS, 2, 0, 1, 0);
    CHECK_STATUS(run_node(n, 17, 2, in, 1, out), OTTER_ERR_INVALID);
    CHECK(strstr(otter_last_error(), "InPlaceAccumulatorV2") != NULL);
    otter_node_free(n);
    in[1] = val;
    /* v1: update_signal false leaves the sum */
    n = mknode("InPlaceAccumulator", MS, 3, 0, 1, 0);
    in[2] = no;
    double keep[6];
    for (int i = 0; i < 6; i++) keep[i] = F(buf)[i];
    CHECK_OK(run_node(n, 17, 3, in, 1, out));
    check_close("InPlaceAccumulator update_signal=false: unchanged", out[0], keep, 6, 0);
    free_all(1, out);
    in[2] = yes;
    CHECK_OK(run_node(n, 17, 3, in, 1, out));
    for (int i = 0; i < 6; i++) keep[i] += v0[i];
    check_close("InPlaceAccumulator update_signal=true: old_sum + value", out[0], keep, 6, 0);
    check_close("InPlaceAccumulator: old_sum updated in place", buf, keep, 6, 0);
    free_all(1, out);
    otter_node_free(n);
    n = mknode("ZeroGradient", MS, 2, 0, 1, 0);
    in[1] = yes;
    CHECK_OK(run_node(n, 17, 2, in, 1, out));
    double zero[6] = {0};
    check_close("ZeroGradient: output and buffer zero", out[0], zero, 6, 0);
    check_close("ZeroGradient: buffer zeroed in place", buf, zero, 6, 0);
    free_all(1, out);
    otter_node_free(n);
    otter_tensor_free(buf), otter_tensor_free(val), otter_tensor_free(no), otter_tensor_free(yes),
        otter_tensor_free(bad);
}

/* ---- activations ----------------------------------------------------------------------------------- */

/* grad(dY, Y or X [, B]) vs FD of fwd(X [, B]). use_y: the grad takes the forward output. */
static void act_case(const char *fwd_op, const char *fwd_dom, const char *grad_op, bool use_y, bool bias, double eps,
                     double tol, bool avoid_zero) {
    int64_t d[2] = {3, 5}, bd = 5;
    otter_tensor *x = trand(2, d, -2, 2), *b = bias ? trand(1, &bd, -0.5, 0.5) : NULL;
    if (avoid_zero)
        for (int i = 0; i < 15; i++) F(x)[i] = F(x)[i] < 0 ? F(x)[i] - 0.1f : F(x)[i] + 0.1f;
    otter_node *fwd = mknode(fwd_op, fwd_dom, bias ? 2 : 1, 0, 1, 0);
    otter_tensor *fin[2] = {x, b}, *y[1] = {0}, *g[1] = {0};
    CHECK_OK(run_node(fwd, 17, bias ? 2 : 1, fin, 1, y));
    otter_tensor *R = trand(2, d, -1, 1);
    otter_node *gn = mknode(grad_op, MS, bias ? 3 : 2, 0, 1, 0);
    otter_tensor *gin[3] = {R, use_y ? y[0] : x, b};
    CHECK_OK(run_node(gn, 17, bias ? 3 : 2, gin, 1, g));
    char what[128];
    snprintf(what, sizeof what, "%s vs FD of %s (X)", grad_op, fwd_op);
    check_fd(what, fwd, 17, bias ? 2 : 1, fin, 0, R, g[0], eps, tol);
    otter_node_free(fwd), otter_node_free(gn);
    otter_tensor_free(x), otter_tensor_free(b), otter_tensor_free(R), otter_tensor_free(y[0]), otter_tensor_free(g[0]);
}

/* com.otter ClipGrad(dY, X, min?, max?): dY where min <= X <= max, at the bounds too (the subgradient 1,
 * as PyTorch's clamp), 0 outside; a NaN in X passes dY (as the decomposed Less / Greater / Or / Where); an
 * absent bound doesn't clip. Long enough for several pieces on 2 threads. */
static void test_clip_grad(void) {
    printf("ClipGrad:\n");
    enum { N = 70000 };
    int64_t n = N, one = 1;
    float lo = -0.5f, hi = 0.5f, xs[7] = {-0.7f, -0.5f, -0.2f, 0.5f, 0.6f, NAN, 0.0f};
    otter_tensor *x = trand(1, &n, -1, 1), *dy = trand(1, &n, -1, 1), *tlo = tf(0, &one, &lo), *thi = tf(0, &one, &hi);
    for (int i = 0; i < 7; i++) F(x)[i * 9999] = xs[i];
    double *want = malloc(sizeof(double) * N);
    for (int bounds = 0; bounds < 3; bounds++) { /* both, min only, max only */
        for (int64_t i = 0; i < N; i++) {
            const float v = F(x)[i];
            const bool out = (bounds != 2 && v < lo) || (bounds != 1 && v > hi);
            want[i] = out ? 0.0 : F(dy)[i];
        }
        otter_node *g = mknode("ClipGrad", "com.otter", 4, bounds == 1 ? 0x8u : bounds == 2 ? 0x4u : 0u, 1, 0);
        otter_tensor *in[4] = {dy, x, bounds == 2 ? NULL : tlo, bounds == 1 ? NULL : thi}, *out[1] = {0};
        run_threads = 2;
        CHECK_OK(run_node(g, 17, 4, in, 1, out));
        run_threads = 1;
        check_close(bounds == 0   ? "ClipGrad both bounds"
                    : bounds == 1 ? "ClipGrad min only"
                                  : "ClipGrad max only",
                    out[0], want, N, 0);
        free_all(1, out);
        otter_node_free(g);
    }
    free(want);
    otter_tensor_free(x), otter_tensor_free(dy), otter_tensor_free(tlo), otter_tensor_free(thi);
}

static void test_activations(void) {
    printf("activation gradients:\n");
    act_case("Relu", NULL, "ReluGrad", false, false, 1e-2, 2e-3, true);
    act_case("Sigmoid", NULL, "SigmoidGrad", true, false, 1e-2, 2e-3, false);
    act_case("Tanh", NULL, "TanhGrad", true, false, 1e-2, 2e-3, false);
    act_case("Gelu", MS, "GeluGrad", false, false, 1e-2, 2e-3, false);
    act_case("FastGelu", MS, "FastGeluGrad", false, false, 1e-2, 2e-3, false);
    act_case("BiasGelu", MS, "BiasGeluGrad_dX", false, true, 1e-2, 2e-3, false);
    /* Gelu forward values against erf in double; FastGelu against the tanh formula */
    int64_t n = 7;
    float xs[7] = {-3, -1.5f, -0.3f, 0, 0.2f, 1, 2.5f};
    otter_tensor *x = tf(1, &n, xs), *out[1] = {0};
    double want[7], want_fast[7];
    for (int i = 0; i < 7; i++) {
        want[i] = 0.5 * xs[i] * (1 + erf(xs[i] / sqrt(2.0)));
        want_fast[i] = 0.5 * xs[i] * (1 + tanh(sqrt(2 / M_PI) * (xs[i] + 0.044715 * xs[i] * xs[i] * xs[i])));
    }
    otter_node *g = mknode("Gelu", MS, 1, 0, 1, 0);
    CHECK_OK(run_node(g, 17, 1, &x, 1, out));
    check_close("com.microsoft Gelu vs 0.5x(1+erf(x/sqrt2))", out[0], want, 7, 1e-6);
    free_all(1, out);
    otter_node_free(g);
    g = mknode("FastGelu", MS, 1, 0, 1, 0);
    CHECK_OK(run_node(g, 17, 1, &x, 1, out));
    check_close("com.microsoft FastGelu vs tanh approximation", out[0], want_fast, 7, 1e-6);
    free_all(1, out);
    otter_node_free(g);
    otter_tensor_free(x);
}

/* SoftmaxGrad family vs FD of (Log)Softmax. */
static void softmax_case(const char *fwd_op, int opset, const char *grad_op, int64_t axis) {
    int64_t d[3] = {2, 3, 4};
    otter_tensor *x = trand(3, d, -2, 2), *y[1] = {0}, *g[1] = {0}, *R = trand(3, d, -1, 1);
    otter_node *fwd = mknode(fwd_op, NULL, 1, 0, 1, 0), *gn = mknode(grad_op, MS, 2, 0, 1, 0);
    otter_node_set_attr_int(fwd, "axis", axis);
    otter_node_set_attr_int(gn, "axis", axis);
    CHECK_OK(run_node(fwd, opset, 1, &x, 1, y));
    otter_tensor *gin[2] = {R, y[0]};
    CHECK_OK(run_node(gn, 17, 2, gin, 1, g));
    char what[128];
    snprintf(what, sizeof what, "%s axis %lld vs FD of %s-%d", grad_op, (long long)axis, fwd_op, opset);
    check_fd(what, fwd, opset, 1, &x, 0, R, g[0], 1e-2, 2e-3);
    otter_node_free(fwd), otter_node_free(gn);
    otter_tensor_free(x), otter_tensor_free(R), otter_tensor_free(y[0]), otter_tensor_free(g[0]);
}

static void test_softmax(void) {
    printf("softmax gradients:\n");
    softmax_case("Softmax", 13, "SoftmaxGrad_13", 1);
    softmax_case("Softmax", 13, "SoftmaxGrad_13", -1);
    softmax_case("Softmax", 11, "SoftmaxGrad", 1); /* coerced to 2-D: [2, 12] */
    softmax_case("LogSoftmax", 13, "LogSoftmaxGrad_13", 1);
    softmax_case("LogSoftmax", 11, "LogSoftmaxGrad", 1);
    /* lines of 37 (four running sums and a tail), 40 x 9 of them along the last axis and 40 x 37 strided
     * (axis 1 of [40, 37, 9]), on 2 threads, against the formulas in double */
    for (int log = 0; log < 2; log++)
        for (int64_t axis = 1; axis <= 2; axis++) {
            int64_t d[3] = {40, axis == 1 ? 37 : 9, axis == 1 ? 9 : 37};
            const int64_t inner = axis == 1 ? 9 : 1, mid = 37, n = 40 * 37 * 9;
            otter_tensor *y = trand(3, d, 0.01, 1), *dy = trand(3, d, -1, 1), *g[1] = {0};
            double *want = calloc((size_t)n, sizeof *want);
            for (int64_t l = 0; l < n / mid; l++) {
                const int64_t base = l / inner * mid * inner + l % inner;
                double sum = 0;
                for (int64_t k = 0; k < mid; k++) sum += F(dy)[base + k * inner] * (log ? 1.0 : F(y)[base + k * inner]);
                for (int64_t k = 0; k < mid; k++) {
                    const int64_t i = base + k * inner;
                    want[i] = log ? F(dy)[i] - exp(F(y)[i]) * sum : F(y)[i] * (F(dy)[i] - sum);
                }
            }
            otter_node *gn = mknode(log ? "LogSoftmaxGrad_13" : "SoftmaxGrad_13", MS, 2, 0, 1, 0);
            otter_node_set_attr_int(gn, "axis", axis);
            otter_tensor *gin[2] = {dy, y};
            run_threads = 2;
            CHECK_OK(run_node(gn, 17, 2, gin, 1, g));
            run_threads = 1;
            check_close(log ? (axis == 1 ? "LogSoftmaxGrad_13 axis 1 of [40, 37, 9], 2 threads"
                                         : "LogSoftmaxGrad_13 axis 2 of [40, 9, 37], 2 threads")
                            : (axis == 1 ? "SoftmaxGrad_13 axis 1 of [40, 37, 9], 2 threads"
                                         : "SoftmaxGrad_13 axis 2 of [40, 9, 37], 2 threads"),
                        g[0], want, n, 1e-5);
            free(want);
            otter_node_free(gn);
            otter_tensor_free(y), otter_tensor_free(dy), otter_tensor_free(g[0]);
        }
}

/* ---- normalization ----------------------------------------------------------------------------------- */

static void test_layernorm(void) {
    printf("layer normalization:\n");
    int64_t d[3] = {2, 3, 4}, sd[2] = {3, 4};
    otter_tensor *x = trand(3, d, -2, 2), *sc = trand(2, sd, 0.5, 1.5), *b = trand(2, sd, -1, 1);
    otter_tensor *R = trand(3, d, -1, 1), *y[3] = {0}, *g[3] = {0};
    otter_node *fwd = mknode("LayerNormalization", NULL, 3, 0, 3, 0);
    otter_node_set_attr_int(fwd, "axis", 1);
    otter_node_set_attr_float(fwd, "epsilon", 1e-5f);
    otter_tensor *fin[3] = {x, sc, b};
    CHECK_OK(run_node(fwd, 17, 3, fin, 3, y));
    CHECK(y[1] && y[2] && otter_tensor_numel(y[1]) == 2 && otter_tensor_numel(y[2]) == 2);
    otter_node *gn = mknode("LayerNormalizationGrad", MS, 5, 0, 3, 0);
    otter_node_set_attr_int(gn, "axis", 1);
    otter_tensor *gin[5] = {R, x, sc, y[1], y[2]};
    CHECK_OK(run_node(gn, 17, 5, gin, 3, g));
    check_fd("LayerNormalizationGrad dX vs FD of LayerNormalization", fwd, 17, 3, fin, 0, R, g[0], 1e-2, 3e-3);
    check_fd("LayerNormalizationGrad dScale", fwd, 17, 3, fin, 1, R, g[1], 1e-2, 2e-3);
    check_fd("LayerNormalizationGrad dBias", fwd, 17, 3, fin, 2, R, g[2], 1e-2, 2e-3);
    CHECK(g[1] && g[1]->rank == 2 && g[1]->dims[0] == 3);
    free_all(3, g);
    free_all(3, y);
    otter_node_free(fwd), otter_node_free(gn);
    /* 70 rows of 37 (row blocks over 2 threads, the last one partial; rows not a multiple of the
     * four running sums) against the formulas in double, the same bits on 1 and 2 threads */
    {
        int64_t dl[2] = {70, 37}, sl[1] = {37}, st[2] = {70, 1};
        otter_tensor *xl = trand(2, dl, -2, 2), *dyl = trand(2, dl, -1, 1), *scl = trand(1, sl, 0.5, 1.5);
        otter_tensor *mean, *inv, *gl[2][3] = {{0}};
        CHECK_OK(otter_tensor_create(&mean, "mean", OTTER_DTYPE_FLOAT, 2, st));
        CHECK_OK(otter_tensor_create(&inv, "inv", OTTER_DTYPE_FLOAT, 2, st));
        double *want = calloc(70 * 37 + 2 * 37, sizeof *want), *wds = want + 70 * 37, *wdb = wds + 37;
        for (int64_t r = 0; r < 70; r++) {
            double m = 0, v = 0, sg = 0, sgx = 0;
            for (int64_t i = 0; i < 37; i++) m += F(xl)[r * 37 + i] / 37.0;
            for (int64_t i = 0; i < 37; i++) v += pow(F(xl)[r * 37 + i] - m, 2) / 37.0;
            F(mean)[r] = (float)m, F(inv)[r] = (float)(1 / sqrt(v + 1e-5));
            for (int64_t i = 0; i < 37; i++) {
                double xh = (F(xl)[r * 37 + i] - F(mean)[r]) * F(inv)[r], g = F(dyl)[r * 37 + i] * F(scl)[i];
                sg += g / 37.0, sgx += g * xh / 37.0;
                wds[i] += F(dyl)[r * 37 + i] * xh, wdb[i] += F(dyl)[r * 37 + i];
            }
            for (int64_t i = 0; i < 37; i++) {
                double xh = (F(xl)[r * 37 + i] - F(mean)[r]) * F(inv)[r];
                want[r * 37 + i] = F(inv)[r] * (F(dyl)[r * 37 + i] * F(scl)[i] - sg - xh * sgx);
            }
        }
        otter_node *gl_node = mknode("LayerNormalizationGrad", MS, 5, 0, 3, 0);
        otter_tensor *glin[5] = {dyl, xl, scl, mean, inv};
        for (int t = 0; t < 2; t++) {
            run_threads = t + 1;
            CHECK_OK(run_node(gl_node, 17, 5, glin, 3, gl[t]));
        }
        run_threads = 1;
        check_close("LayerNormalizationGrad dX, 70 rows of 37, 2 threads", gl[1][0], want, 70 * 37, 1e-5);
        check_close("LayerNormalizationGrad dScale, 70 rows of 37, 2 threads", gl[1][1], wds, 37, 1e-5);
        check_close("LayerNormalizationGrad dBias, 70 rows of 37, 2 threads", gl[1][2], wdb, 37, 1e-5);
        for (int k = 0; k < 3; k++)
            CHECK(gl[0][k] && gl[1][k] &&
                  !memcmp(gl[0][k]->data, gl[1][k]->data, (size_t)otter_tensor_numel(gl[0][k]) * 4));
        free(want);
        free_all(3, gl[0]), free_all(3, gl[1]);
        otter_node_free(gl_node);
        otter_tensor_free(xl), otter_tensor_free(dyl), otter_tensor_free(scl), otter_tensor_free(mean),
            otter_tensor_free(inv);
    }
    /* Simplified (RMSNorm) */
    fwd = mknode("SimplifiedLayerNormalization", NULL, 2, 0, 2, 0);
    otter_node_set_attr_int(fwd, "axis", -2);
    CHECK_OK(run_node(fwd, 17, 2, fin, 2, y));
    gn = mknode("SimplifiedLayerNormalizationGrad", MS, 4, 0, 2, 0);
    otter_node_set_attr_int(gn, "axis", -2);
    otter_tensor *gin2[4] = {R, x, sc, y[1]};
    CHECK_OK(run_node(gn, 17, 4, gin2, 2, g));
    check_fd("SimplifiedLayerNormalizationGrad dX vs FD of forward", fwd, 17, 2, fin, 0, R, g[0], 1e-2, 3e-3);
    check_fd("SimplifiedLayerNormalizationGrad dScale", fwd, 17, 2, fin, 1, R, g[1], 1e-2, 2e-3);
    /* forward value: y = x / rms * scale for row 0 */
    double ss = 0, want[12];
    for (int i = 0; i < 12; i++) ss += (double)F(x)[i] * F(x)[i];
    for (int i = 0; i < 12; i++) want[i] = F(x)[i] / sqrt(ss / 12 + 1e-5) * F(sc)[i];
    otter_tensor row = *y[0];
    row.dims[0] = 1;
    check_close("SimplifiedLayerNormalization forward row 0 vs formula", &row, want, 12, 1e-5);
    free_all(2, g);
    free_all(2, y);
    otter_node_free(fwd), otter_node_free(gn);
    otter_tensor_free(x), otter_tensor_free(sc), otter_tensor_free(b), otter_tensor_free(R);
}

static void test_batchnorm(void) {
    printf("batch normalization:\n");
    /* 35 values a plane: the kernels' 16- and 8-wide blocks and their scalar tails */
    enum { SP = 35, PER_CHANNEL = 3 * SP };
    int64_t d[4] = {3, 2, 5, 7}, c = 2;
    otter_tensor *x = trand(4, d, -2, 2), *sc = trand(1, &c, 0.5, 1.5), *b = trand(1, &c, -1, 1);
    otter_tensor *rm = trand(1, &c, -0.2, 0.2), *rv = trand(1, &c, 0.8, 1.2);
    otter_tensor *fin[5] = {x, sc, b, rm, rv}, *y[5] = {0}, *ref[3] = {0}, *g[3] = {0};
    /* The reference first: BatchNormInternal writes the new running statistics into rm and rv. */
    otter_tensor *rm0, *rv0;
    CHECK_OK(otter_tensor_clone(&rm0, rm));
    CHECK_OK(otter_tensor_clone(&rv0, rv));
    otter_node *bn = mknode("BatchNormalization", NULL, 5, 0, 3, 0);
    otter_node_set_attr_int(bn, "training_mode", 1);
    otter_node_set_attr_float(bn, "momentum", 0.8f);
    CHECK_OK(run_node(bn, 15, 5, fin, 3, ref));
    otter_node *fwd = mknode("BatchNormInternal", MS, 5, 0, 5, 0);
    otter_node_set_attr_float(fwd, "momentum", 0.8f);
    CHECK_OK(run_node(fwd, 15, 5, fin, 5, y));
    /* In place, as ORT's kernel (outputs 1 and 2 alias inputs 3 and 4). */
    bool in_place = true;
    for (int64_t i = 0; i < 2; i++)
        in_place &= F(rm)[i] == F(y[1])[i] && F(rv)[i] == F(y[2])[i] && F(rm)[i] != F(rm0)[i];
    CHECK(in_place);
    printf("  BatchNormInternal updates the running statistics in place: %s\n", in_place ? "yes" : "NO");
    otter_tensor_free(rm0);
    otter_tensor_free(rv0);
    double w[2 * PER_CHANNEL];
    for (int k = 0; k < 3; k++) {
        for (int64_t i = 0; i < otter_tensor_numel(ref[k]); i++) w[i] = F(ref[k])[i];
        check_close(k == 0   ? "BatchNormInternal Y vs BatchNormalization-15 training"
                    : k == 1 ? "BatchNormInternal running_mean vs BatchNormalization"
                             : "BatchNormInternal running_var vs BatchNormalization",
                    y[k], w, otter_tensor_numel(ref[k]), 1e-5);
    }
    /* saved statistics from the data */
    double mean[2] = {0, 0}, var[2] = {0, 0}, inv[2];
    for (int n = 0; n < 3; n++)
        for (int ch = 0; ch < 2; ch++)
            for (int i = 0; i < SP; i++) mean[ch] += F(x)[(n * 2 + ch) * SP + i] / PER_CHANNEL;
    for (int n = 0; n < 3; n++)
        for (int ch = 0; ch < 2; ch++)
            for (int i = 0; i < SP; i++) {
                double e = F(x)[(n * 2 + ch) * SP + i] - mean[ch];
                var[ch] += e * e / PER_CHANNEL;
            }
    for (int ch = 0; ch < 2; ch++) inv[ch] = 1 / sqrt(var[ch] + 1e-5);
    check_close("BatchNormInternal saved_mean", y[3], mean, 2, 1e-6);
    check_close("BatchNormInternal saved_inv_std", y[4], inv, 2, 1e-5);
    otter_tensor *R = trand(4, d, -1, 1);
    otter_node *gn = mknode("BatchNormalizationGrad", MS, 5, 0, 3, 0);
    otter_tensor *gin[5] = {R, x, sc, y[3], y[4]};
    CHECK_OK(run_node(gn, 15, 5, gin, 3, g));
    check_fd("BatchNormalizationGrad dX vs FD of BatchNormInternal", fwd, 15, 5, fin, 0, R, g[0], 1e-2, 3e-3);
    check_fd("BatchNormalizationGrad dScale", fwd, 15, 5, fin, 1, R, g[1], 1e-2, 2e-3);
    check_fd("BatchNormalizationGrad dBias", fwd, 15, 5, fin, 2, R, g[2], 1e-2, 2e-3);
    free_all(3, g), free_all(5, y), free_all(3, ref);
    otter_node_free(fwd), otter_node_free(bn), otter_node_free(gn);
    otter_tensor *all[6] = {x, sc, b, rm, rv, R};
    free_all(6, all);
}

static void test_dropout_grad(void) {
    printf("DropoutGrad:\n");
    int64_t d = 6, one = 1;
    otter_tensor *dy = trand(1, &d, -1, 1), *out[1] = {0};
    uint8_t m[6] = {1, 0, 1, 1, 0, 1}, fl = 0;
    float r = 0.25f;
    otter_tensor *mask = tbool(1, &d, m), *ratio = tf(0, NULL, &r), *tm = tbool(1, &one, &fl);
    otter_node *n = mknode("DropoutGrad", MS, 3, 0, 1, 0);
    otter_tensor *in[4] = {dy, mask, ratio, tm};
    CHECK_OK(run_node(n, 17, 3, in, 1, out));
    double want[6];
    for (int i = 0; i < 6; i++) want[i] = m[i] ? F(dy)[i] / 0.75 : 0.0;
    check_close("DropoutGrad dY*mask/(1-ratio), ratio 0.25", out[0], want, 6, 1e-6);
    free_all(1, out);
    otter_node_free(n);
    n = mknode("DropoutGrad", MS, 4, 0, 1, 0);
    CHECK_OK(run_node(n, 17, 4, in, 1, out));
    for (int i = 0; i < 6; i++) want[i] = F(dy)[i];
    check_close("DropoutGrad training_mode=false passes dY", out[0], want, 6, 0);
    free_all(1, out);
    otter_node_free(n);
    otter_tensor *all[4] = {dy, mask, ratio, tm};
    free_all(4, all);
    /* more elements than a task takes (split over 2 threads), with a bool mask and a float one */
    int64_t big = 200003;
    otter_tensor *bdy = trand(1, &big, -1, 1), *bmask = NULL, *fmask = NULL, *bout[1] = {0};
    CHECK_OK(otter_tensor_create(&bmask, NULL, OTTER_DTYPE_BOOL, 1, &big));
    CHECK_OK(otter_tensor_create(&fmask, NULL, OTTER_DTYPE_FLOAT, 1, &big));
    double *bw = malloc(sizeof(double) * (size_t)big);
    for (int64_t i = 0; i < big; i++) {
        ((uint8_t *)bmask->data)[i] = (uint8_t)(i % 3 != 0);
        F(fmask)[i] = (float)(i % 3 != 0);
        bw[i] = i % 3 ? F(bdy)[i] / 0.75 : 0.0;
    }
    otter_tensor *r2 = tf(0, NULL, &r);
    n = mknode("DropoutGrad", MS, 3, 0, 1, 0);
    run_threads = 2;
    for (int fm = 0; fm <= 1; fm++) {
        otter_tensor *bin[3] = {bdy, fm ? fmask : bmask, r2};
        CHECK_OK(run_node(n, 17, 3, bin, 1, bout));
        check_close(fm ? "DropoutGrad 200003 elements, float mask, 2 threads"
                       : "DropoutGrad 200003 elements, bool mask, 2 threads",
                    bout[0], bw, big, 1e-6);
        free_all(1, bout);
    }
    run_threads = 1;
    otter_node_free(n);
    free(bw);
    otter_tensor *ball[4] = {bdy, bmask, fmask, r2};
    free_all(4, ball);
}

/* ---- convolution ------------------------------------------------------------------------------------- */

typedef struct conv_attrs {
    int nd;
    int64_t strides[3], pads[6], dil[3], group, opad[3];
    const char *auto_pad;
} conv_attrs;

static void set_conv_attrs(otter_node *n, const conv_attrs *a, bool transpose) {
    otter_node_set_attr_ints(n, "strides", (size_t)a->nd, a->strides);
    otter_node_set_attr_ints(n, "dilations", (size_t)a->nd, a->dil);
    if (a->auto_pad)
        otter_node_set_attr_string(n, "auto_pad", a->auto_pad);
    else
        otter_node_set_attr_ints(n, "pads", (size_t)(2 * a->nd), a->pads);
    otter_node_set_attr_int(n, "group", a->group);
    if (transpose && a->opad[0] + a->opad[1] + a->opad[2])
        otter_node_set_attr_ints(n, "output_padding", (size_t)a->nd, a->opad);
}

static void conv_case(const char *label, bool transpose, int rank, const int64_t *xd, const int64_t *wd,
                      const conv_attrs *a) {
    int64_t bd = transpose ? wd[1] * a->group : wd[0];
    otter_tensor *x = trand(rank, xd, -1, 1), *w = trand(rank, wd, -1, 1), *b = trand(1, &bd, -0.5, 0.5);
    otter_node *fwd = mknode(transpose ? "ConvTranspose" : "Conv", NULL, 3, 0, 1, 0);
    set_conv_attrs(fwd, a, transpose);
    otter_tensor *fin[3] = {x, w, b}, *y[1] = {0}, *g[3] = {0};
    CHECK_OK(run_node(fwd, 17, 3, fin, 1, y));
    if (!y[0]) {
        otter_node_free(fwd);
        otter_tensor_free(x), otter_tensor_free(w), otter_tensor_free(b);
        return;
    }
    otter_tensor *R = trand(y[0]->rank, y[0]->dims, -1, 1);
    otter_node *gn = mknode(transpose ? "ConvTransposeGrad" : "ConvGrad", MS, 3, 0, 3, 0);
    set_conv_attrs(gn, a, transpose);
    otter_tensor *gin[3] = {R, x, w};
    CHECK_OK(run_node(gn, 17, 3, gin, 3, g));
    char what[160];
    snprintf(what, sizeof what, "%s %s dX", transpose ? "ConvTransposeGrad" : "ConvGrad", label);
    check_fd(what, fwd, 17, 3, fin, 0, R, g[0], 1e-2, 2e-3);
    snprintf(what, sizeof what, "%s %s dW", transpose ? "ConvTransposeGrad" : "ConvGrad", label);
    check_fd(what, fwd, 17, 3, fin, 1, R, g[1], 1e-2, 2e-3);
    snprintf(what, sizeof what, "%s %s dB", transpose ? "ConvTransposeGrad" : "ConvGrad", label);
    check_fd(what, fwd, 17, 3, fin, 2, R, g[2], 1e-2, 2e-3);
    /* only dW wanted (dX and dB named ""): same dW */
    otter_node *gw = mknode(transpose ? "ConvTransposeGrad" : "ConvGrad", MS, 3, 0, 3, 0x5);
    set_conv_attrs(gw, a, transpose);
    otter_tensor *g2[3] = {0};
    CHECK_OK(run_node(gw, 17, 3, gin, 3, g2));
    CHECK(g2[0] == NULL && g2[1] && g[1] && otter_tensor_equal(g2[1], g[1]));
    free_all(3, g2), free_all(3, g);
    otter_node_free(fwd), otter_node_free(gn), otter_node_free(gw);
    otter_tensor *all[5] = {x, w, b, R, y[0]};
    free_all(5, all);
}

/* ConvGrad over many images (several column chunks, a partial last one) against direct loops:
 * dW[m][c][i][j] = sum dY[n][m][oh][ow] X[n][c'][ih][iw], dX the adjoint, dB the sum of dY. */
static void conv_ref_case(const char *label, const int64_t *xd, const int64_t *wd, const conv_attrs *a) {
    const int64_t N = xd[0], C = xd[1], H = xd[2], W = xd[3], M = wd[0], Cg = wd[1], KH = wd[2], KW = wd[3];
    const int64_t G = a->group, Mg = M / G, sh = a->strides[0], sw = a->strides[1], dh = a->dil[0], dw = a->dil[1];
    const int64_t ph = a->pads[0], pw = a->pads[1];
    const int64_t OH = (H + a->pads[0] + a->pads[2] - (KH - 1) * dh - 1) / sh + 1;
    const int64_t OW = (W + a->pads[1] + a->pads[3] - (KW - 1) * dw - 1) / sw + 1;
    int64_t yd[4] = {N, M, OH, OW};
    otter_tensor *x = trand(4, xd, -1, 1), *w = trand(4, wd, -1, 1), *R = trand(4, yd, -1, 1);
    otter_tensor *dx = tf(4, xd, NULL), *dwr = tf(4, wd, NULL), *db = tf(1, &M, NULL);
    memset(dx->data, 0, otter_tensor_nbytes(dx)), memset(dwr->data, 0, otter_tensor_nbytes(dwr));
    memset(db->data, 0, otter_tensor_nbytes(db));
    const float *X = F(x), *Wt = F(w), *DY = F(R);
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    float d = DY[((n * M + m) * OH + oh) * OW + ow];
                    F(db)[m] += d;
                    for (int64_t c = 0; c < Cg; c++)
                        for (int64_t i = 0; i < KH; i++)
                            for (int64_t j = 0; j < KW; j++) {
                                int64_t ih = oh * sh - ph + i * dh, iw = ow * sw - pw + j * dw;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                int64_t xi = ((n * C + (m / Mg) * Cg + c) * H + ih) * W + iw;
                                int64_t wi = ((m * Cg + c) * KH + i) * KW + j;
                                F(dwr)[wi] += d * X[xi];
                                F(dx)[xi] += d * Wt[wi];
                            }
                }
    otter_node *gn = mknode("ConvGrad", MS, 3, 0, 3, 0);
    set_conv_attrs(gn, a, false);
    otter_tensor *gin[3] = {R, x, w}, *g[3] = {0};
    CHECK_OK(run_node(gn, 17, 3, gin, 3, g));
    otter_tensor *want[3] = {dx, dwr, db};
    const char *names[3] = {"dX", "dW", "dB"};
    for (int k = 0; k < 3; k++) {
        tu_checks++;
        double worst = 0;
        bool ok = g[k] && otter_tensor_numel(g[k]) == otter_tensor_numel(want[k]);
        for (int64_t i = 0; ok && i < otter_tensor_numel(want[k]); i++) {
            worst = tu_worse(worst, fabs((double)F(g[k])[i] - F(want[k])[i]) / (1 + fabs((double)F(want[k])[i])));
        }
        if (!ok || !(worst <= 1e-4)) {
            tu_failures++;
            fprintf(stderr, "ConvGrad %s %s: FAIL (worst rel err %g)\n", label, names[k], worst);
        }
        printf("  ConvGrad %-40s %s vs direct loops: worst rel err %.2e\n", label, names[k], worst);
    }
    free_all(3, g);
    otter_node_free(gn);
    otter_tensor *all[6] = {x, w, R, dx, dwr, db};
    free_all(6, all);
}

/* ConvGrad at stride 1 (dX by the direct kernel, dW and dB as elsewhere) against direct loops. */
static void conv_direct_dx_cases(void) {
    int64_t sx[4] = {3, 4, 9, 11}, sw[4] = {10, 2, 3, 2};
    conv_attrs s1 = {2, {1, 1, 1}, {2, 0, 1, 3, 0, 0}, {2, 1, 1}, 2, {0, 0, 0}, NULL};
    conv_ref_case("N 3, groups 2, stride 1, pads (2,0,1,3), dil (2,1)", sx, sw, &s1);
    /* opt level 2 (training sessions' level): dX by Winograd F(2x2, 3x3) beside the AVX2 path, also over
     * a crop (pad 3) */
    run_opt_level = 2;
    int64_t wx[4] = {3, 16, 16, 17}, ww[4] = {24, 16, 3, 3};
    conv_attrs w1 = {2, {1, 1, 1}, {1, 1, 1, 1, 0, 0}, {1, 1, 1}, 1, {0, 0, 0}, NULL};
    conv_ref_case("level 2: N 3, 16 -> 24 channels, 3x3 pad 1", wx, ww, &w1);
    conv_attrs w3 = {2, {1, 1, 1}, {3, 3, 3, 3, 0, 0}, {1, 1, 1}, 1, {0, 0, 0}, NULL};
    conv_ref_case("level 2: N 3, 16 -> 24 channels, 3x3 pad 3", wx, ww, &w3);
    run_opt_level = 0;
    int64_t sx2[4] = {2, 3, 6, 7}, sw2[4] = {7, 3, 1, 1};
    conv_attrs s2 = {2, {1, 1, 1}, {1, 1, 1, 1, 0, 0}, {1, 1, 1}, 1, {0, 0, 0}, NULL};
    conv_ref_case("N 2, 1x1 pad 1 (dX crops)", sx2, sw2, &s2);
    int64_t sx3[4] = {2, 5, 13, 13}, sw3[4] = {7, 5, 5, 5};
    conv_attrs s3 = {2, {1, 1, 1}, {2, 2, 2, 2, 0, 0}, {1, 1, 1}, 1, {0, 0, 0}, NULL};
    conv_ref_case("N 2, 5x5 pad 2, 7 outputs, width 13", sx3, sw3, &s3);
    /* 13 -> 25 channels (dX's 13: a block of 12 and one of 1), rows of 37 (halves of 8 and a part) */
    int64_t sx4[4] = {2, 13, 6, 37}, sw4[4] = {25, 13, 3, 3};
    conv_attrs s4 = {2, {1, 1, 1}, {1, 1, 1, 1, 0, 0}, {1, 1, 1}, 1, {0, 0, 0}, NULL};
    conv_ref_case("N 2, 13 -> 25 channels, 3x3 pad 1, width 37", sx4, sw4, &s4);
    /* 4x4 images (16 positions): dX by the product and col2im beside the AVX-512 path, else direct */
    int64_t sx5[4] = {3, 16, 4, 4}, sw5[4] = {24, 16, 3, 3};
    conv_ref_case("N 3, 16 -> 24 channels, 3x3 pad 1, 4x4", sx5, sw5, &s4);
    /* 16+ images, small maps or strides: dX with the images in the lanes and dW tap by tap beside the
     * AVX-512 and AVX2 paths (conv_small.c): 2x2 (a partial block of 20 images, 29 = 12 + 12 + 5 input channels;
     * AVX2: 16 + 4 images, dX's 6 x 4 + 5 and dW's 16 + 13 channels); stride 2 with pads (0,1,2,1) and dilation
     * (2,1) over 9x11, 40 images (32 + 8), 16 output channels (AVX2: 6 + 6 + 4), 2 threads; 1x1 stride 2 (AVX-512
     * only) */
    int64_t sx6[4] = {20, 29, 2, 2}, sw6[4] = {24, 29, 3, 3};
    conv_ref_case("N 20, 29 -> 24 channels, 3x3 pad 1, 2x2", sx6, sw6, &s4);
    int64_t sx7[4] = {40, 17, 9, 11}, sw7[4] = {16, 17, 3, 3};
    conv_attrs s7 = {2, {2, 2, 1}, {0, 1, 2, 1, 0, 0}, {2, 1, 1}, 1, {0, 0, 0}, NULL};
    run_threads = 2;
    conv_ref_case("2 threads: N 40, 17 -> 16, stride 2, pads (0,1,2,1)", sx7, sw7, &s7);
    run_threads = 1;
    int64_t sx8[4] = {16, 32, 6, 6}, sw8[4] = {48, 32, 1, 1};
    conv_attrs s8 = {2, {2, 2, 1}, {0}, {1, 1, 1}, 1, {0, 0, 0}, NULL};
    conv_ref_case("N 16, 32 -> 48 channels, 1x1 stride 2", sx8, sw8, &s8);
}

static void test_conv(void) {
    printf("convolution gradients:\n");
    int64_t xd[4] = {2, 4, 5, 6}, wd[4] = {6, 2, 3, 2};
    conv_attrs a = {2, {2, 1, 1}, {1, 0, 1, 1, 0, 0}, {1, 2, 1}, 2, {0, 0, 0}, NULL};
    conv_case("2-D groups 2, strides (2,1), pads (1,0,1,1), dilations (1,2)", false, 4, xd, wd, &a);
    int64_t xd1[3] = {2, 3, 9}, wd1[3] = {4, 3, 3};
    conv_attrs a1 = {1, {2, 1, 1}, {2, 1, 0}, {2, 1, 1}, 1, {0, 0, 0}, NULL};
    conv_case("1-D stride 2, pads (2,1), dilation 2", false, 3, xd1, wd1, &a1);
    conv_attrs a1s = {1, {1, 1, 1}, {2, 1, 0}, {2, 1, 1}, 1, {0, 0, 0}, NULL};
    conv_case("1-D stride 1, pads (2,1), dilation 2", false, 3, xd1, wd1, &a1s);
    conv_attrs a2 = {2, {1, 1, 1}, {0}, {1, 1, 1}, 1, {0, 0, 0}, "SAME_UPPER"};
    int64_t xd2[4] = {1, 2, 4, 5}, wd2[4] = {3, 2, 3, 3};
    conv_case("2-D auto_pad SAME_UPPER", false, 4, xd2, wd2, &a2);
    /* many images: ConvGrad's column chunks (about 4096 columns) with a partial last chunk */
    int64_t rx[4] = {7, 3, 33, 31}, rw[4] = {5, 3, 3, 3};
    conv_attrs r = {2, {1, 1, 1}, {1, 1, 1, 1, 0, 0}, {1, 1, 1}, 1, {0, 0, 0}, NULL};
    conv_ref_case("N 7, 3x3 pad 1 (chunks 5 + 2)", rx, rw, &r);
    int64_t rx2[4] = {6, 4, 70, 69}, rw2[4] = {6, 2, 3, 2};
    conv_attrs r2 = {2, {2, 2, 1}, {1, 0, 2, 1, 0, 0}, {2, 1, 1}, 2, {0, 0, 0}, NULL};
    conv_ref_case("N 6, groups 2, strides 2, pads (1,0,2,1), dil (2,1)", rx2, rw2, &r2);
    int64_t rx3[4] = {7, 2, 1, 3001}, rw3[4] = {3, 2, 1, 4};
    conv_attrs r3 = {2, {1, 3, 1}, {0, 2, 0, 1, 0, 0}, {1, 1, 1}, 1, {0, 0, 0}, NULL};
    conv_ref_case("N 7, 1x4 stride 3, odd width", rx3, rw3, &r3);
    /* threads: dW's positions (7161, 7140) split over them, the splits inside images */
    run_threads = 3;
    conv_ref_case("3 threads: N 7, 3x3 pad 1", rx, rw, &r);
    run_threads = 2;
    conv_ref_case("2 threads: N 6, groups 2, strides 2", rx2, rw2, &r2);
    run_threads = 1;
    /* pointwise (1x1, stride 1, no pad): dW as one product per image, rows over the threads */
    int64_t ptx[4] = {5, 7, 6, 5}, ptw[4] = {20, 7, 1, 1};
    conv_attrs pta = {2, {1, 1, 1}, {0}, {1, 1, 1}, 1, {0, 0, 0}, NULL};
    run_threads = 1;
    conv_ref_case("pointwise N 5, 7 -> 20 channels", ptx, ptw, &pta);
    run_threads = 2;
    conv_ref_case("2 threads: pointwise N 5, 7 -> 20 channels", ptx, ptw, &pta);
    run_threads = 1;
    /* depthwise (group == C: conv_depthwise.c): stride 2 with a channel multiplier of 2, stride 1 dilated,
     * at 1 and 2 threads (input channels split over the threads) */
    int64_t dx1[4] = {5, 6, 13, 12}, dw1[4] = {12, 1, 3, 3};
    conv_attrs d1 = {2, {2, 2, 1}, {1, 1, 1, 0, 0, 0}, {1, 1, 1}, 6, {0, 0, 0}, NULL};
    conv_ref_case("depthwise N 5, x2 channels, strides 2, pads (1,1,1,0)", dx1, dw1, &d1);
    int64_t dx2[4] = {3, 7, 11, 9}, dw2[4] = {7, 1, 5, 5};
    conv_attrs d2 = {2, {1, 1, 1}, {4, 2, 4, 2, 0, 0}, {2, 1, 1}, 7, {0, 0, 0}, NULL};
    run_threads = 2;
    conv_ref_case("2 threads: depthwise 5x5, dil (2,1)", dx2, dw2, &d2);
    conv_ref_case("2 threads: depthwise N 5, x2 channels, strides 2", dx1, dw1, &d1);
    run_threads = 1;
    /* stride 1: dX by the direct convolution with the flipped kernel (pads (k-1)*dil - pad, which
     * is negative, a crop, when a pad exceeds the kernel's reach), on each of its vector paths the CPU
     * runs (conv_direct.h) */
    const int best = (int)ot_conv_direct_isa();
    for (int isa = best; isa == best || isa >= (int)OT_CONV_ISA_AVX2; isa--) {
        ot_conv_direct_cap_isa((ot_conv_isa)isa);
        printf("  direct kernel path %s:\n", isa == OT_CONV_ISA_AVX512 ? "avx512"
                                             : isa == OT_CONV_ISA_AVX2 ? "avx2"
                                                                       : "none");
        conv_direct_dx_cases();
    }
    ot_conv_direct_cap_isa(OT_CONV_ISA_AVX512);
    conv_attrs s2 = {2, {1, 1, 1}, {1, 1, 1, 1, 0, 0}, {1, 1, 1}, 1, {0, 0, 0}, NULL};
    /* dW's packing in blocks of 8 positions x 8 taps: rows shorter than a block, a block and a
     * part (K slices of 150 positions start inside rows), taps cut by pads and dilation, a last
     * slab of 2 taps, channel slabs of 6, 6, 1 */
    int64_t px[4] = {5, 6, 4, 3}, pw[4] = {9, 2, 3, 3};
    conv_attrs p1 = {2, {1, 1, 1}, {1, 1, 1, 1, 0, 0}, {1, 1, 1}, 3, {0, 0, 0}, NULL};
    conv_ref_case("N 5, groups 3, width 3, 18 taps", px, pw, &p1);
    int64_t px2[4] = {3, 2, 5, 20}, pw2[4] = {13, 2, 3, 3};
    conv_ref_case("N 3, 13 channels, width 20, K slices of 150", px2, pw2, &s2);
    int64_t px3[4] = {4, 3, 6, 10}, pw3[4] = {8, 3, 2, 5};
    conv_attrs p3 = {2, {1, 1, 1}, {0, 3, 1, 4, 0, 0}, {1, 2, 1}, 1, {0, 0, 0}, NULL};
    conv_ref_case("N 4, 2x5 pads (0,3,1,4), dil (1,2), width 9", px3, pw3, &p3);
    /* ConvTranspose: W is (C, M/group, k...) */
    int64_t txd[4] = {2, 4, 3, 4}, twd[4] = {4, 3, 3, 2};
    conv_attrs t = {2, {2, 2, 1}, {1, 0, 0, 1, 0, 0}, {1, 1, 1}, 2, {1, 0, 0}, NULL};
    conv_case("2-D groups 2, strides 2, pads (1,0,0,1), output_padding (1,0)", true, 4, txd, twd, &t);
    int64_t txd1[3] = {1, 2, 5}, twd1[3] = {2, 3, 3};
    conv_attrs t1 = {1, {3, 1, 1}, {1, 2, 0}, {2, 1, 1}, 1, {0, 0, 0}, NULL};
    conv_case("1-D stride 3, pads (1,2), dilation 2", true, 3, txd1, twd1, &t1);
}

/* ---- pooling ----------------------------------------------------------------------------------------- */

/* MaxPool with Indices (the training paths: nn_pool.c's vectorized 2x2 stride 2 loop and the clipped
 * windows of other 2-D shapes) against the scan the general loop does: taps in row-major order, a
 * later tap wins only when strictly greater (ties and NaN keep the first). Inputs drawn from
 * {0, -0, 0.5, 1, NaN} so ties and NaNs are everywhere; odd sizes leave a row and a column unread
 * (2x2) or clip windows at the padding and the ceil_mode edge (3x3, as resnet18 and squeezenet).
 * Values and indices must match bit for bit. */
static void check_maxpool_indices(int64_t k, int64_t stride, int64_t pad, int64_t ceil_mode) {
    const int64_t xd[4] = {2, 3, 7, 9};
    otter_tensor *x = tf(4, xd, NULL);
    const float pick[5] = {0.0f, -0.0f, 0.5f, 1.0f, NAN};
    for (int64_t i = 0; i < otter_tensor_numel(x); i++) F(x)[i] = pick[(int)(urand() * 5)];
    const int64_t ks[2] = {k, k}, ss[2] = {stride, stride}, pads[4] = {pad, pad, pad, pad};
    otter_node *fwd = mknode("MaxPool", NULL, 1, 0, 2, 0);
    otter_node_set_attr_ints(fwd, "kernel_shape", 2, ks);
    otter_node_set_attr_ints(fwd, "strides", 2, ss);
    otter_node_set_attr_ints(fwd, "pads", 4, pads);
    otter_node_set_attr_int(fwd, "ceil_mode", ceil_mode);
    otter_tensor *y[2] = {0};
    CHECK_OK(run_node(fwd, 12, 1, &x, 2, y));
    const int64_t H = xd[2], W = xd[3], OH = y[0] ? y[0]->dims[2] : 0, OW = y[0] ? y[0]->dims[3] : 0;
    int64_t bad = 0;
    for (int64_t pl = 0; y[0] && pl < xd[0] * xd[1]; pl++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t best = -1;
                for (int64_t ih = oh * stride - pad; ih < oh * stride - pad + k; ih++)
                    for (int64_t iw = ow * stride - pad; iw < ow * stride - pad + k; iw++) {
                        if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                        int64_t t = pl * H * W + ih * W + iw;
                        if (best < 0 || F(x)[t] > F(x)[best]) best = t;
                    }
                int64_t o = (pl * OH + oh) * OW + ow;
                bad += memcmp(&F(y[0])[o], &F(x)[best], sizeof(float)) != 0 || ((int64_t *)y[1]->data)[o] != best;
            }
    CHECK(y[0] && OH > 0 && bad == 0);
    printf("  MaxPool %lldx%lld/%lld pad %lld%s with Indices vs first-max scan: %lld of %lld windows differ\n",
           (long long)k, (long long)k, (long long)stride, (long long)pad, ceil_mode ? " ceil" : "", (long long)bad,
           (long long)(xd[0] * xd[1] * OH * OW));
    free_all(2, y);
    otter_tensor_free(x);
    otter_node_free(fwd);
}

/* MaxPool without Indices, 2-D windows other than 2x2/2 (nn_pool.c's separable, vectorized path)
 * against the first-max scan over each clipped window from -inf (a later tap wins only when strictly
 * greater), bit for bit: inputs from {0, -0, 0.5, 1, NaN, -inf}; pads, strides 1-3, ceil_mode,
 * kernels wider than the stride, rows over the path's 256-column chunks and narrower than a kernel. */
static void test_maxpool_windows(void) {
    const struct {
        int64_t H, W, kh, kw, sh, sw, pads[4], ceil;
    } cases[] = {
        {16, 16, 3, 3, 2, 2, {1, 1, 1, 1}, 0}, /* shufflenet's stem pooling */
        {9, 11, 3, 3, 1, 1, {1, 1, 1, 1}, 0},  {7, 10, 5, 4, 2, 3, {2, 0, 1, 3}, 0},
        {8, 9, 3, 3, 2, 2, {0, 0, 0, 0}, 1},   {3, 600, 2, 3, 1, 1, {0, 1, 0, 1}, 0},
        {5, 2, 3, 3, 1, 2, {1, 1, 1, 1}, 0},   {6, 521, 1, 7, 1, 2, {0, 3, 0, 3}, 1},
    };
    const float pick[6] = {0.0f, -0.0f, 0.5f, 1.0f, NAN, -INFINITY};
    int64_t bad = 0, total = 0;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const int64_t H = cases[c].H, W = cases[c].W, xd[4] = {2, 3, H, W};
        otter_tensor *x = tf(4, xd, NULL);
        for (int64_t i = 0; i < otter_tensor_numel(x); i++) F(x)[i] = pick[(int)(urand() * 6)];
        otter_node *fwd = mknode("MaxPool", NULL, 1, 0, 1, 0);
        otter_node_set_attr_ints(fwd, "kernel_shape", 2, (const int64_t[]){cases[c].kh, cases[c].kw});
        otter_node_set_attr_ints(fwd, "strides", 2, (const int64_t[]){cases[c].sh, cases[c].sw});
        otter_node_set_attr_ints(fwd, "pads", 4, cases[c].pads);
        otter_node_set_attr_int(fwd, "ceil_mode", cases[c].ceil);
        otter_tensor *y = NULL;
        CHECK_OK(run_node(fwd, 12, 1, &x, 1, &y));
        const int64_t OH = y ? y->dims[2] : 0, OW = y ? y->dims[3] : 0;
        for (int64_t pl = 0; pl < xd[0] * xd[1]; pl++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    float best = -INFINITY;
                    for (int64_t ih = oh * cases[c].sh - cases[c].pads[0];
                         ih < oh * cases[c].sh - cases[c].pads[0] + cases[c].kh; ih++)
                        for (int64_t iw = ow * cases[c].sw - cases[c].pads[1];
                             iw < ow * cases[c].sw - cases[c].pads[1] + cases[c].kw; iw++)
                            if (ih >= 0 && ih < H && iw >= 0 && iw < W && F(x)[(pl * H + ih) * W + iw] > best)
                                best = F(x)[(pl * H + ih) * W + iw];
                    bad += memcmp(&F(y)[(pl * OH + oh) * OW + ow], &best, sizeof best) != 0;
                    total++;
                }
        CHECK(y != NULL);
        otter_tensor_free(y);
        otter_tensor_free(x);
        otter_node_free(fwd);
    }
    CHECK(bad == 0);
    printf("  MaxPool without Indices (7 window geometries) vs first-max scan: %lld of %lld windows differ\n",
           (long long)bad, (long long)total);
}

/* GlobalAveragePool (nn_pool.c: eight double lanes; 32 with AVX-512 from 32 elements; planes under 8
 * four side by side) against the sequential double sum divided by the plane size, over planes from 1
 * to 1030 elements (lane tails of every length): within one float ulp (the double sum's order), and
 * equal on all but rare planes. */
static void test_global_avgpool(void) {
    const int64_t sizes[][2] = {{1, 1}, {1, 7}, {2, 4}, {3, 3}, {1, 9}, {8, 8}, {31, 33}, {10, 103}};
    int64_t differ = 0, planes = 0;
    double worst_ulps = 0;
    for (size_t c = 0; c < sizeof sizes / sizeof *sizes; c++) {
        const int64_t xd[4] = {2, 5, sizes[c][0], sizes[c][1]}, sp = sizes[c][0] * sizes[c][1];
        otter_tensor *x = tf(4, xd, NULL);
        for (int64_t i = 0; i < otter_tensor_numel(x); i++) F(x)[i] = (float)(urand() * 4.0 - 1.0);
        otter_node *n = mknode("GlobalAveragePool", NULL, 1, 0, 1, 0);
        otter_tensor *y = NULL;
        CHECK_OK(run_node(n, 12, 1, &x, 1, &y));
        for (int64_t p = 0; y && p < xd[0] * xd[1]; p++) {
            double s = 0;
            for (int64_t i = 0; i < sp; i++) s += F(x)[p * sp + i];
            const float want = (float)(s / (double)sp), got = F(y)[p];
            const double ulps = fabs((double)got - want) / (nextafterf(fabsf(want), INFINITY) - fabsf(want));
            worst_ulps = ulps > worst_ulps ? ulps : worst_ulps;
            differ += got != want;
            planes++;
        }
        CHECK(y != NULL);
        otter_tensor_free(y);
        otter_tensor_free(x);
        otter_node_free(n);
    }
    CHECK(worst_ulps <= 1.0 && differ * 20 <= planes);
    printf("  GlobalAveragePool vs sequential double sum: %lld of %lld planes differ, worst %.0f ulp\n",
           (long long)differ, (long long)planes, worst_ulps);
}

static void test_maxpool_indices(void) {
    check_maxpool_indices(2, 2, 0, 0);
    check_maxpool_indices(3, 2, 1, 0);
    check_maxpool_indices(3, 2, 0, 1);
    check_maxpool_indices(3, 1, 1, 0);
}

static void test_pool(void) {
    printf("pooling gradients:\n");
    int64_t xd[4] = {2, 2, 5, 6};
    /* distinct values 0.05 apart, shuffled: no ties, FD step 1e-3 never changes the argmax */
    otter_tensor *x = tf(4, xd, NULL);
    int64_t n = otter_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) F(x)[i] = (float)(0.05 * (double)i - 2.0);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(urand() * (double)(i + 1));
        float t = F(x)[i];
        F(x)[i] = F(x)[j], F(x)[j] = t;
    }
    int64_t ks[2] = {3, 2}, st[2] = {2, 2}, pads[4] = {1, 0, 0, 1}; /* H: floor 2 vs ceil 3 outputs */
    otter_node *fwd = mknode("MaxPool", NULL, 1, 0, 2, 0);
    otter_node_set_attr_ints(fwd, "kernel_shape", 2, ks);
    otter_node_set_attr_ints(fwd, "strides", 2, st);
    otter_node_set_attr_ints(fwd, "pads", 4, pads);
    otter_tensor *y[2] = {0}, *g[1] = {0};
    CHECK_OK(run_node(fwd, 12, 1, &x, 2, y));
    otter_tensor *R = trand(y[0]->rank, y[0]->dims, -1, 1);
    otter_node *gn = mknode("MaxPoolGrad", MS, 2, 0, 1, 0);
    otter_node_set_attr_ints(gn, "kernel_shape", 2, ks);
    otter_node_set_attr_ints(gn, "strides", 2, st);
    otter_node_set_attr_ints(gn, "pads", 4, pads);
    /* value_info: batch and channel symbolic, spatial fixed */
    vi_rank = 4;
    vi_dims[0] = -1, vi_dims[1] = -1, vi_dims[2] = 5, vi_dims[3] = 6;
    otter_tensor *gin[2] = {R, y[1]};
    CHECK_OK(run_node(gn, 12, 2, gin, 1, g));
    vi_rank = -1;
    otter_tensor *xin[1] = {x};
    check_fd("MaxPoolGrad (3x2, stride 2, pads) vs FD of MaxPool", fwd, 12, 1, xin, 0, R, g[0], 1e-3, 2e-3);
    /* com.otter's form (runtime/fuse.c) takes X's shape as input 2 instead of value_info: same bits */
    otter_node *fused = mknode("MaxPoolGrad", "com.otter", 3, 0, 1, 0);
    otter_tensor *fin[3] = {R, y[1], tshape(x)}, *fg[1] = {0};
    CHECK_OK(run_node(fused, 12, 3, fin, 1, fg));
    CHECK(fg[0] && fg[0]->rank == 4 && !memcmp(fg[0]->dims, xd, sizeof xd) &&
          !memcmp(fg[0]->data, g[0]->data, otter_tensor_nbytes(g[0])));
    printf("  com.otter MaxPoolGrad with X's shape as input: equal to MaxPoolGrad with value_info\n");
    free_all(1, fg);
    otter_tensor_free(fin[2]);
    /* indices leaving their (n, c) plane and repeated ones: the serial loop, sums in dY's order; one out of
     * range: an error naming it */
    const int64_t dyd[4] = {2, 1, 1, 2}, xsd[4] = {2, 1, 2, 2}, four = 4;
    otter_tensor *sin[3] = {tf(4, dyd, (const float[]){1, 2, 4, 8}), ti64(4, dyd, (const int64_t[]){0, 5, 4, 0}),
                            ti64(1, &four, xsd)};
    CHECK_OK(run_node(fused, 12, 3, sin, 1, fg));
    CHECK(fg[0] && !memcmp(fg[0]->data, (const float[]){9, 0, 0, 0, 4, 2, 0, 0}, 8 * sizeof(float)));
    free_all(1, fg);
    ((int64_t *)sin[1]->data)[2] = 8;
    CHECK_STATUS(run_node(fused, 12, 3, sin, 1, fg), OTTER_ERR_INVALID);
    CHECK(strstr(otter_last_error(), "value 8 out of range") != NULL);
    printf("  com.otter MaxPoolGrad: indices across planes summed in order; index 8 of 8 elements refused\n");
    free_all(3, sin);
    otter_node_free(fused);
    free_all(1, g);
    /* without value_info: a clear error */
    CHECK_STATUS(run_node(gn, 12, 2, gin, 1, g), OTTER_ERR_INVALID);
    CHECK(strstr(otter_last_error(), "value_info") != NULL);
    otter_node_free(fwd), otter_node_free(gn);
    free_all(2, y);
    otter_tensor_free(R);
    for (int incl = 0; incl < 2; incl++)
        for (int ceil = 0; ceil < 2; ceil++) {
            fwd = mknode("AveragePool", NULL, 1, 0, 1, 0);
            gn = mknode("AveragePoolGrad", MS, 1, 0, 1, 0);
            otter_node *both[2] = {fwd, gn};
            for (int k = 0; k < 2; k++) {
                otter_node_set_attr_ints(both[k], "kernel_shape", 2, ks);
                otter_node_set_attr_ints(both[k], "strides", 2, st);
                otter_node_set_attr_ints(both[k], "pads", 4, pads);
                otter_node_set_attr_int(both[k], "count_include_pad", incl);
                otter_node_set_attr_int(both[k], "ceil_mode", ceil);
            }
            CHECK_OK(run_node(fwd, 19, 1, &x, 1, y));
            R = trand(y[0]->rank, y[0]->dims, -1, 1);
            vi_rank = 4;
            vi_dims[0] = 2, vi_dims[1] = -1, vi_dims[2] = 5, vi_dims[3] = 6;
            CHECK_OK(run_node(gn, 19, 1, &R, 1, g));
            vi_rank = -1;
            char what[128];
            snprintf(what, sizeof what, "AveragePoolGrad count_include_pad %d ceil_mode %d vs FD", incl, ceil);
            check_fd(what, fwd, 19, 1, xin, 0, R, g[0], 1e-2, 2e-3);
            free_all(1, g), free_all(1, y);
            otter_tensor_free(R);
            otter_node_free(fwd), otter_node_free(gn);
        }
    otter_tensor_free(x);
}

/* ---- indexing ---------------------------------------------------------------------------------------- */

static void test_indexing(void) {
    printf("indexing gradients:\n");
    int64_t xd[3] = {3, 4, 2}, id[2] = {2, 2}, iv[4] = {1, -1, 1, 0};
    otter_tensor *x = trand(3, xd, -1, 1), *ind = ti64(2, id, iv), *y[1] = {0}, *g[1] = {0};
    otter_node *fwd = mknode("Gather", NULL, 2, 0, 1, 0), *gn = mknode("GatherGrad", MS, 3, 0, 1, 0);
    otter_node_set_attr_int(fwd, "axis", 1), otter_node_set_attr_int(gn, "axis", 1);
    otter_tensor *fin[2] = {x, ind};
    CHECK_OK(run_node(fwd, 13, 2, fin, 1, y));
    otter_tensor *R = trand(y[0]->rank, y[0]->dims, -1, 1), *shp = tshape(x);
    otter_tensor *gin[3] = {shp, ind, R};
    CHECK_OK(run_node(gn, 13, 3, gin, 1, g));
    check_fd("GatherGrad axis 1, repeated and negative indices", fwd, 13, 2, fin, 0, R, g[0], 1e-2, 1e-3);
    free_all(1, g), free_all(1, y);
    otter_tensor_free(R), otter_tensor_free(ind);
    otter_node_free(fwd), otter_node_free(gn);
    /* GatherElements axis 0, indices smaller than data */
    int64_t ed[3] = {2, 3, 2}, ev[12] = {2, 0, 1, 1, 0, 2, 0, 0, 2, 1, 1, 2};
    ind = ti64(3, ed, ev);
    fwd = mknode("GatherElements", NULL, 2, 0, 1, 0), gn = mknode("GatherElementsGrad", MS, 3, 0, 1, 0);
    otter_node_set_attr_int(fwd, "axis", 0), otter_node_set_attr_int(gn, "axis", 0);
    fin[1] = ind;
    CHECK_OK(run_node(fwd, 13, 2, fin, 1, y));
    R = trand(y[0]->rank, y[0]->dims, -1, 1);
    otter_tensor *gin2[3] = {R, shp, ind};
    CHECK_OK(run_node(gn, 13, 3, gin2, 1, g));
    check_fd("GatherElementsGrad axis 0", fwd, 13, 2, fin, 0, R, g[0], 1e-2, 1e-3);
    free_all(1, g), free_all(1, y);
    otter_tensor_free(R), otter_tensor_free(ind);
    otter_node_free(fwd), otter_node_free(gn);
    /* GatherND batch_dims 1: indices (3, 2, 1) pick rows of each batch */
    int64_t nd_[3] = {3, 2, 1}, nv[6] = {1, 1, 0, 3, 2, 2};
    ind = ti64(3, nd_, nv);
    fwd = mknode("GatherND", NULL, 2, 0, 1, 0), gn = mknode("GatherNDGrad", MS, 3, 0, 1, 0);
    otter_node_set_attr_int(fwd, "batch_dims", 1), otter_node_set_attr_int(gn, "batch_dims", 1);
    fin[1] = ind;
    CHECK_OK(run_node(fwd, 13, 2, fin, 1, y));
    R = trand(y[0]->rank, y[0]->dims, -1, 1);
    otter_tensor *gin3[3] = {shp, ind, R};
    CHECK_OK(run_node(gn, 13, 3, gin3, 1, g));
    check_fd("GatherNDGrad batch_dims 1", fwd, 13, 2, fin, 0, R, g[0], 1e-2, 1e-3);
    free_all(1, g), free_all(1, y);
    otter_tensor_free(R), otter_tensor_free(ind);
    otter_node_free(fwd), otter_node_free(gn);
    /* Slice with negative step and clamped ends */
    int64_t one = 2, sv[2] = {-1, 0}, en[2] = {0, 100}, ax[2] = {1, 2}, sp[2] = {-2, 1};
    otter_tensor *starts = ti64(1, &one, sv), *ends = ti64(1, &one, en), *axes = ti64(1, &one, ax),
                 *steps = ti64(1, &one, sp);
    fwd = mknode("Slice", NULL, 5, 0, 1, 0), gn = mknode("SliceGrad", MS, 6, 0, 1, 0);
    otter_tensor *sin[5] = {x, starts, ends, axes, steps};
    CHECK_OK(run_node(fwd, 13, 5, sin, 1, y));
    R = trand(y[0]->rank, y[0]->dims, -1, 1);
    otter_tensor *gin4[6] = {R, shp, starts, ends, axes, steps};
    CHECK_OK(run_node(gn, 13, 6, gin4, 1, g));
    check_fd("SliceGrad starts -1, ends 0, step -2 (axis 1), clamped end", fwd, 13, 5, sin, 0, R, g[0], 1e-2, 1e-3);
    free_all(1, g), free_all(1, y);
    otter_tensor_free(R);
    /* strided along the last axis (rows of dY added with a stride), forwards and backwards */
    static const int64_t sv2[2][2] = {{1, 0}, {0, -1}}, en2[2][2] = {{100, 100}, {100, -100}},
                         sp2[2][2] = {{1, 2}, {2, -3}};
    int64_t ax2[2] = {0, 2}, x7d[3] = {3, 2, 7};
    otter_tensor *axes2 = ti64(1, &one, ax2), *x7 = trand(3, x7d, -1, 1), *shp7 = tshape(x7);
    for (int c = 0; c < 2; c++) {
        otter_tensor *st2 = ti64(1, &one, sv2[c]), *en2t = ti64(1, &one, en2[c]), *sp2t = ti64(1, &one, sp2[c]);
        otter_tensor *sin2[5] = {x7, st2, en2t, axes2, sp2t};
        CHECK_OK(run_node(fwd, 13, 5, sin2, 1, y));
        R = trand(y[0]->rank, y[0]->dims, -1, 1);
        otter_tensor *gin5[6] = {R, shp7, st2, en2t, axes2, sp2t};
        CHECK_OK(run_node(gn, 13, 6, gin5, 1, g));
        check_fd(c ? "SliceGrad step 2 (axis 0), step -3 (last axis)" : "SliceGrad step 2 along the last axis", fwd, 13,
                 5, sin2, 0, R, g[0], 1e-2, 1e-3);
        free_all(1, g), free_all(1, y);
        otter_tensor *tmp[4] = {R, st2, en2t, sp2t};
        free_all(4, tmp);
    }
    otter_node_free(fwd), otter_node_free(gn);
    otter_tensor *all[8] = {axes2, x7, shp7, starts, ends, axes, steps, shp};
    free_all(8, all);
    otter_tensor_free(x);
}

/* ---- losses ------------------------------------------------------------------------------------------- */

static void sce_case(const char *reduction, bool weighted, bool ignore, bool internal) {
    int64_t xd[3] = {4, 5, 2}, ld[2] = {4, 2}, c = 5;
    int64_t lv[8] = {0, 4, 2, 2, 1, 3, 4, 0};
    otter_tensor *x = trand(3, xd, -2, 2), *lab = ti64(2, ld, lv), *w = weighted ? trand(1, &c, 0.5, 2) : NULL;
    int64_t iiv = 2;
    otter_tensor *ii = ti64(0, NULL, &iiv);
    otter_tensor *fin[4] = {x, lab, w, internal && ignore ? ii : NULL}, *y[2] = {0}, *g[1] = {0};
    unsigned skip = (weighted ? 0u : 0x4u) | (internal && !ignore ? 0x8u : 0u);
    otter_node *fwd = mknode(internal ? "SoftmaxCrossEntropyLossInternal" : "SoftmaxCrossEntropyLoss",
                             internal ? MS : NULL, internal ? 4 : 3, skip, 2, 0);
    otter_node_set_attr_string(fwd, "reduction", reduction);
    if (ignore && !internal) otter_node_set_attr_int(fwd, "ignore_index", 2);
    CHECK_OK(run_node(fwd, 13, internal ? 4 : 3, fin, 2, y));
    if (!y[0]) return;
    otter_tensor *R = trand(y[0]->rank, y[0]->dims, 0.5, 1.5);
    const char *gop = internal ? "SoftmaxCrossEntropyLossInternalGrad" : "SoftmaxCrossEntropyLossGrad";
    otter_node *gn = mknode(gop, MS, internal ? 5 : 4, (weighted ? 0 : 0x8) | (internal && !ignore ? 0x10 : 0), 1, 0);
    otter_node_set_attr_string(gn, "reduction", reduction);
    if (ignore && !internal) otter_node_set_attr_int(gn, "ignore_index", 2);
    otter_tensor *gin[5] = {R, y[1], lab, w, internal && ignore ? ii : NULL};
    CHECK_OK(run_node(gn, 13, internal ? 5 : 4, gin, 1, g));
    char what[160];
    snprintf(what, sizeof what, "%s %s%s%s", gop, reduction, weighted ? " weighted" : "",
             ignore ? (internal ? " ignore_index input" : " ignore_index") : "");
    check_fd(what, fwd, 13, internal ? 4 : 3, fin, 0, R, g[0], 1e-2, 2e-3);
    free_all(1, g), free_all(2, y);
    otter_node_free(fwd), otter_node_free(gn);
    otter_tensor *all[5] = {x, lab, w, ii, R};
    free_all(5, all);
}

static void test_losses(void) {
    printf("softmax cross-entropy:\n");
    sce_case("mean", false, false, false);
    sce_case("mean", true, true, false);
    sce_case("sum", true, false, false);
    sce_case("none", false, true, false);
    sce_case("mean", true, true, true);
    sce_case("none", true, false, true);
    /* Internal forward equals ai.onnx SoftmaxCrossEntropyLoss with the ignore_index attribute */
    int64_t xd[2] = {3, 4}, ld = 3, lv[3] = {1, 3, 0}, iiv = 3;
    otter_tensor *x = trand(2, xd, -1, 1), *lab = ti64(1, &ld, lv), *ii = ti64(0, NULL, &iiv);
    otter_tensor *a[2] = {0}, *b[2] = {0};
    otter_node *n1 = mknode("SoftmaxCrossEntropyLoss", NULL, 2, 0, 2, 0);
    otter_node_set_attr_int(n1, "ignore_index", 3);
    otter_node *n2 = mknode("SoftmaxCrossEntropyLossInternal", MS, 4, 0x4, 2, 0);
    otter_tensor *in1[2] = {x, lab}, *in2[4] = {x, lab, NULL, ii};
    CHECK_OK(run_node(n1, 13, 2, in1, 2, a));
    CHECK_OK(run_node(n2, 13, 4, in2, 2, b));
    double want[12];
    for (int i = 0; i < 12; i++) want[i] = F(a[1])[i];
    double wl = F(a[0])[0];
    check_close("SoftmaxCrossEntropyLossInternal loss vs ai.onnx SCE", b[0], &wl, 1, 1e-6);
    check_close("SoftmaxCrossEntropyLossInternal log_prob vs ai.onnx SCE", b[1], want, 12, 1e-6);
    free_all(2, a), free_all(2, b);
    otter_node_free(n1), otter_node_free(n2);
    otter_tensor_free(x), otter_tensor_free(lab), otter_tensor_free(ii);
}

/* ---- layout and math ------------------------------------------------------------------------------------- */

static void test_misc(void) {
    printf("ConcatTraining, SplitTraining, FusedMatMul, Scale, ReduceAllL2:\n");
    int64_t ad[2] = {2, 3}, bd[2] = {2, 1};
    float av[6] = {1, 2, 3, 4, 5, 6}, bv[2] = {7, 8};
    otter_tensor *a = tf(2, ad, av), *b = tf(2, bd, bv), *out[3] = {0};
    otter_node *n = mknode("ConcatTraining", MS, 2, 0, 2, 0);
    otter_node_set_attr_int(n, "axis", 1);
    otter_tensor *in[2] = {a, b};
    CHECK_OK(run_node(n, 17, 2, in, 2, out));
    double want[8] = {1, 2, 3, 7, 4, 5, 6, 8};
    check_close("ConcatTraining axis 1", out[0], want, 8, 0);
    CHECK(out[1] && out[1]->dtype == OTTER_DTYPE_INT64 && ((int64_t *)out[1]->data)[0] == 3 &&
          ((int64_t *)out[1]->data)[1] == 1);
    otter_node_free(n);
    n = mknode("SplitTraining", MS, 2, 0, 2, 0);
    otter_node_set_attr_int(n, "axis", 1);
    int64_t two = 2, sv[2] = {3, 1};
    otter_tensor *split = ti64(1, &two, sv), *sin[2] = {out[0], split}, *parts[2] = {0};
    CHECK_OK(run_node(n, 17, 2, sin, 2, parts));
    CHECK(parts[0] && parts[1] && otter_tensor_equal(parts[0], a) && otter_tensor_equal(parts[1], b));
    free_all(2, parts), free_all(2, out);
    otter_node_free(n), otter_tensor_free(split);
    /* FusedMatMul: A (2, 1, 4, 3) transA, B (3, 5, 4) transB, alpha 0.5 -> (2, 3, 3, 5) */
    int64_t fa[4] = {2, 1, 4, 3}, fb[3] = {3, 5, 4};
    otter_tensor *A = trand(4, fa, -1, 1), *B = trand(3, fb, -1, 1);
    n = mknode("FusedMatMul", MS, 2, 0, 1, 0);
    otter_node_set_attr_int(n, "transA", 1), otter_node_set_attr_int(n, "transB", 1);
    otter_node_set_attr_float(n, "alpha", 0.5f);
    otter_tensor *min[2] = {A, B};
    CHECK_OK(run_node(n, 17, 2, min, 1, out));
    double fm[90];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int r = 0; r < 3; r++)
                for (int c = 0; c < 5; c++) {
                    double s = 0;
                    for (int k = 0; k < 4; k++) s += (double)F(A)[(i * 4 + k) * 3 + r] * F(B)[(j * 5 + c) * 4 + k];
                    fm[((i * 3 + j) * 3 + r) * 5 + c] = 0.5 * s;
                }
    CHECK(out[0] && out[0]->rank == 4 && out[0]->dims[1] == 3 && out[0]->dims[3] == 5);
    check_close("FusedMatMul transA transB alpha 0.5, broadcast batch", out[0], fm, 90, 1e-5);
    free_all(1, out), otter_node_free(n);
    /* transBatchA: A (4, 6, 3) read as (6, 4, 3); transBatchB + transB: B (5, 6, 3) read as (6, 5, 3),
     * then (6, 3, 5) -> Y (6, 4, 5); on 1 thread (a product at a time) and 2 (a product per task) */
    int64_t ta_d[3] = {4, 6, 3}, tb_d[3] = {5, 6, 3};
    otter_tensor *TA = trand(3, ta_d, -1, 1), *TB = trand(3, tb_d, -1, 1), *tin[2] = {TA, TB};
    double tm[120];
    for (int bi = 0; bi < 6; bi++)
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 5; c++) {
                double acc = 0;
                for (int k = 0; k < 3; k++) acc += (double)F(TA)[(r * 6 + bi) * 3 + k] * F(TB)[(c * 6 + bi) * 3 + k];
                tm[(bi * 4 + r) * 5 + c] = 2.0 * acc;
            }
    n = mknode("FusedMatMul", MS, 2, 0, 1, 0);
    otter_node_set_attr_int(n, "transBatchA", 1), otter_node_set_attr_int(n, "transBatchB", 1);
    otter_node_set_attr_int(n, "transB", 1), otter_node_set_attr_float(n, "alpha", 2.0f);
    for (run_threads = 1; run_threads <= 2; run_threads++) {
        CHECK_OK(run_node(n, 17, 2, tin, 1, out));
        CHECK(out[0] && out[0]->rank == 3 && out[0]->dims[0] == 6 && out[0]->dims[1] == 4 && out[0]->dims[2] == 5);
        check_close(run_threads == 1 ? "FusedMatMul transBatchA transBatchB transB alpha 2, 1 thread"
                                     : "FusedMatMul transBatchA transBatchB transB alpha 2, 2 threads",
                    out[0], tm, 120, 1e-5);
        free_all(1, out);
    }
    run_threads = 1;
    otter_node_free(n), otter_tensor_free(TA), otter_tensor_free(TB);
    /* A (3, 5, 7) by a shared 2-D B: one product of 15 rows (rows of every batch of A in turn), with
     * B (7, 9) as stored and (9, 7) under transB, on 1 and 2 threads */
    int64_t fa3[3] = {3, 5, 7}, fbk[2] = {7, 9}, fbt[2] = {9, 7};
    otter_tensor *A3 = trand(3, fa3, -1, 1), *BK = trand(2, fbk, -1, 1), *BT = trand(2, fbt, -1, 1);
    for (int tb = 0; tb <= 1; tb++) {
        double fw[135];
        for (int r = 0; r < 15; r++)
            for (int c = 0; c < 9; c++) {
                double acc = 0;
                for (int k = 0; k < 7; k++)
                    acc += (double)F(A3)[r * 7 + k] * (tb ? F(BT)[c * 7 + k] : F(BK)[k * 9 + c]);
                fw[r * 9 + c] = acc;
            }
        otter_tensor *fin[2] = {A3, tb ? BT : BK};
        n = mknode("FusedMatMul", MS, 2, 0, 1, 0);
        otter_node_set_attr_int(n, "transB", tb);
        for (run_threads = 1; run_threads <= 2; run_threads++) {
            CHECK_OK(run_node(n, 17, 2, fin, 1, out));
            CHECK(out[0] && out[0]->rank == 3 && out[0]->dims[0] == 3 && out[0]->dims[1] == 5 && out[0]->dims[2] == 9);
            check_close(tb ? "FusedMatMul batched A, shared B transB" : "FusedMatMul batched A, shared B", out[0], fw,
                        135, 1e-5);
            free_all(1, out);
        }
        run_threads = 1;
        otter_node_free(n);
    }
    otter_tensor_free(A3), otter_tensor_free(BK), otter_tensor_free(BT);
    float s2 = 4.0f;
    otter_tensor *sc = tf(0, NULL, &s2), *scin[2] = {a, sc};
    n = mknode("Scale", MS, 2, 0, 1, 0);
    otter_node_set_attr_int(n, "scale_down", 1);
    CHECK_OK(run_node(n, 17, 2, scin, 1, out));
    double sw[6];
    for (int i = 0; i < 6; i++) sw[i] = av[i] / 4.0;
    check_close("Scale scale_down=1 (input / 4)", out[0], sw, 6, 0);
    free_all(1, out), otter_node_free(n);
    n = mknode("ReduceAllL2", MS, 2, 0, 1, 0);
    CHECK_OK(run_node(n, 17, 2, in, 1, out));
    double l2 = sqrt(1 + 4 + 9 + 16 + 25 + 36 + 49 + 64.0);
    check_close("ReduceAllL2 over two tensors", out[0], &l2, 1, 1e-7);
    free_all(1, out), otter_node_free(n);
    otter_tensor *all[5] = {a, b, A, B, sc};
    free_all(5, all);
}

/* ---- optimizers ------------------------------------------------------------------------------------------- */

/* The spec's AdamW formulas in double. */
static void adamw_ref(int mode, bool cb, double lr, double a, double b, double eps, double wd, int t, int n, double *w,
                      const double *g, double *m, double *v) {
    double bc1 = cb ? 1 - pow(a, t) : 1, bc2 = cb ? 1 - pow(b, t) : 1;
    for (int i = 0; i < n; i++) {
        if (mode == 0) {
            w[i] -= lr * wd * w[i];
            m[i] = a * m[i] + (1 - a) * g[i];
            v[i] = b * v[i] + (1 - b) * g[i] * g[i];
            w[i] -= lr * m[i] / (bc1 * (sqrt(v[i] / bc2) + eps));
        } else {
            m[i] = a * m[i] + (1 - a) * g[i];
            v[i] = b * v[i] + (1 - b) * g[i] * g[i];
            w[i] -= (lr * sqrt(bc2) / bc1) * m[i] / (sqrt(v[i]) + eps);
            w[i] -= lr * wd * w[i];
        }
    }
}

static void test_adamw(void) {
    printf("optimizer math:\n");
    for (int mode = 0; mode < 2; mode++)
        for (int cb = 0; cb < 2; cb++) {
            ot_adamw_params p = {0.9f, 0.999f, 1e-6f, 0.01f, cb != 0, mode};
            enum { N = 10 };
            float w[N], m[N] = {0}, v[N] = {0};
            double rw[N], rm[N] = {0}, rv[N] = {0};
            for (int i = 0; i < N; i++) w[i] = (float)(urand() - 0.5), rw[i] = w[i];
            double worst = 0;
            for (int t = 1; t <= 5; t++) {
                float g[N];
                double rg[N];
                for (int i = 0; i < N; i++) g[i] = (float)(urand() - 0.5) * (i == 0 ? 1e-4f : 1.0f), rg[i] = g[i];
                ot_adamw_update(&p, 1e-2f, t, N, w, g, m, v);
                adamw_ref(mode, cb, 1e-2, 0.9f, 0.999f, 1e-6f, 0.01f, t, N, rw, rg, rm, rv);
            }
            for (int i = 0; i < N; i++) {
                worst = tu_worse(worst, fabs(w[i] - rw[i]) + fabs(m[i] - rm[i]) + fabs(v[i] - rv[i]));
            }
            tu_checks++;
            if (!(worst < 1e-6)) tu_failures++, fprintf(stderr, "AdamW mode %d cb %d: FAIL %g\n", mode, cb, worst);
            printf("  AdamW adam_mode %d correct_bias %d, 5 steps vs spec formula: worst abs err %.1e (tol 1e-6)\n",
                   mode, cb, worst);
        }
    /* the four-at-a-time loops give the scalar loop's bits (8 elements at once vs one by one), both modes */
    for (int mode = 0; mode < 2; mode++) {
        ot_adamw_params p = {0.9f, 0.999f, 1e-6f, mode ? 0.0f : 0.01f, true, mode};
        enum { N = 8 };
        float w[2][N], m[2][N] = {{0}}, v[2][N] = {{0}}, g[N];
        for (int i = 0; i < N; i++) w[0][i] = w[1][i] = (float)(urand() - 0.5);
        for (int t = 1; t <= 3; t++) {
            for (int i = 0; i < N; i++) g[i] = (float)(urand() - 0.5);
            ot_adamw_update(&p, 1e-2f, t, N, w[0], g, m[0], v[0]);
            for (int i = 0; i < N; i++) ot_adamw_update(&p, 1e-2f, t, 1, w[1] + i, g + i, m[1] + i, v[1] + i);
        }
        CHECK(memcmp(w[0], w[1], sizeof w[0]) == 0 && memcmp(m[0], m[1], sizeof m[0]) == 0 &&
              memcmp(v[0], v[1], sizeof v[0]) == 0);
        printf("  AdamW adam_mode %d: 8 at once and one by one, the same bits\n", mode);
    }
    /* the two modes differ (eps folding): mode 1 with eps 1e-1 vs mode 0 */
    {
        ot_adamw_params p0 = {0.9f, 0.999f, 1e-1f, 0, true, 0}, p1 = p0;
        p1.adam_mode = 1;
        float w0 = 1, w1 = 1, g = 0.5f, m0 = 0, v0 = 0, m1 = 0, v1 = 0;
        ot_adamw_update(&p0, 0.1f, 1, 1, &w0, &g, &m0, &v0);
        ot_adamw_update(&p1, 0.1f, 1, 1, &w1, &g, &m1, &v1);
        /* mode 0: 1 - 0.1 * 0.05 / (0.1 * (0.5 + 0.1)); mode 1: 1 - 0.1*sqrt(0.001)/0.1 * 0.05/(sqrt(0.00025)+0.1) */
        double e0 = 1 - 0.1 * 0.05 / (0.1 * (0.5 + 0.1)), e1 = 1 - sqrt(0.001) * 0.05 / (sqrt(0.00025) + 0.1);
        CHECK(fabs(w0 - e0) < 1e-6 && fabs(w1 - e1) < 1e-6);
        printf("  AdamW one step by hand: mode 0 %.7f (want %.7f), mode 1 %.7f (want %.7f)\n", w0, e0, w1, e1);
    }
    /* tensor-list step: a bad shape changes nothing and names the tensor */
    int64_t d2 = 2, d3 = 3;
    float wv[2] = {1, 2}, gv[2] = {0.5f, -0.5f};
    otter_tensor *w = tf(1, &d2, wv), *g = tf(1, &d2, gv), *m = tf(1, &d2, NULL), *v = tf(1, &d2, NULL),
                 *bad = tf(1, &d3, NULL);
    otter_tensor_set_name(bad, "bad_moment");
    ot_adamw_params p;
    ot_adamw_params_default(&p);
    CHECK(p.alpha == 0.9f && p.beta == 0.999f && p.epsilon == 1e-8f && p.weight_decay == 1e-2f && p.correct_bias &&
          p.adam_mode == 0);
    otter_tensor *W[1] = {w}, *M[1] = {m}, *V[1] = {bad};
    const otter_tensor *G[1] = {g};
    CHECK_STATUS(ot_adamw_step(&p, 0.1f, 1, 1, W, G, M, V), OTTER_ERR_INVALID);
    CHECK(strstr(otter_last_error(), "bad_moment") != NULL && F(w)[0] == 1.0f && F(w)[1] == 2.0f);
    V[0] = v;
    CHECK_OK(ot_adamw_step(&p, 0.1f, 1, 1, W, G, M, V));
    double rw[2] = {1, 2}, rg[2] = {0.5, -0.5}, rm[2] = {0}, rv[2] = {0};
    adamw_ref(0, true, 0.1, 0.9f, 0.999f, 1e-8f, 1e-2f, 1, 2, rw, rg, rm, rv);
    check_close("ot_adamw_step over a tensor list (defaults)", w, rw, 2, 1e-6);
    CHECK_STATUS(ot_adamw_step(&p, 0.1f, 0, 1, W, G, M, V), OTTER_ERR_INVALID); /* step 0 with bias correction */
    /* node attributes */
    otter_node *node = mknode("AdamWOptimizer", MS, 6, 0, 1, 0);
    otter_node_set_attr_float(node, "alpha", 0.8f);
    otter_node_set_attr_float(node, "epsilon", 1e-6f);
    otter_node_set_attr_float(node, "weight_decay", 0.0f);
    otter_node_set_attr_int(node, "adam_mode", 1);
    otter_node_set_attr_int(node, "correct_bias", 0);
    CHECK_OK(ot_adamw_params_from_node(node, &p));
    CHECK(p.alpha == 0.8f && p.beta == 0.999f && p.epsilon == 1e-6f && p.weight_decay == 0 && !p.correct_bias &&
          p.adam_mode == 1);
    otter_node_set_attr_int(node, "adam_mode", 2);
    CHECK_STATUS(ot_adamw_params_from_node(node, &p), OTTER_ERR_INVALID);
    otter_node_free(node);
    /* SGD */
    F(w)[0] = 1, F(w)[1] = 2;
    CHECK_OK(ot_sgd_step(0.5f, 1, W, G));
    double sw[2] = {1 - 0.25, 2 + 0.25};
    check_close("ot_sgd_step w -= lr*g", w, sw, 2, 0);
    /* clip: norm of (3, 4) is 5 -> scaled to norm 1 */
    F(g)[0] = 3, F(g)[1] = 4;
    float total = 0;
    otter_tensor *Gm[1] = {g};
    CHECK_OK(ot_clip_grad_norm(1, Gm, 1.0f, "fro", &total));
    double cw[2] = {3 / (5 + 1e-6), 4 / (5 + 1e-6)};
    CHECK(fabs(total - 5) < 1e-6);
    check_close("ot_clip_grad_norm max_norm 1 on norm 5", g, cw, 2, 1e-6);
    float before[2] = {F(g)[0], F(g)[1]};
    CHECK_OK(ot_clip_grad_norm(1, Gm, 10.0f, NULL, &total)); /* below max: unchanged */
    CHECK(F(g)[0] == before[0] && F(g)[1] == before[1]);
    CHECK_STATUS(ot_clip_grad_norm(1, Gm, 1.0f, "inf", NULL), OTTER_ERR_UNSUPPORTED);
    otter_tensor *all[5] = {w, g, m, v, bad};
    free_all(5, all);
}

/* ai.onnx.preview.training kernels on a case of our own (the conformance suite runs ONNX's). */
static void test_preview(void) {
    printf("ai.onnx.preview.training:\n");
    int64_t d = 3;
    float rv = 0.1f, xv[3] = {1, -2, 0.5f}, gv[3] = {-0.5f, 0.25f, 2}, vv[3] = {0.1f, 0, -0.3f},
          hv[3] = {0.2f, 0.5f, 1};
    int64_t tv = 3;
    otter_tensor *R = tf(0, NULL, &rv), *T = ti64(0, NULL, &tv), *X = tf(1, &d, xv), *G = tf(1, &d, gv),
                 *V = tf(1, &d, vv), *H = tf(1, &d, hv), *out[3] = {0};
    otter_node *n = mknode("Adam", PRV, 6, 0, 3, 0);
    otter_node_set_attr_float(n, "alpha", 0.9f), otter_node_set_attr_float(n, "beta", 0.99f);
    otter_node_set_attr_float(n, "epsilon", 1e-3f), otter_node_set_attr_float(n, "norm_coefficient", 0.01f);
    otter_node_set_attr_float(n, "norm_coefficient_post", 0.02f);
    otter_tensor *in[6] = {R, T, X, G, V, H};
    CHECK_OK(run_node(n, 17, 6, in, 3, out));
    double wx[3], wv[3], wh[3];
    for (int i = 0; i < 3; i++) {
        double a = 0.9f, b = 0.99f, gr = 0.01f * xv[i] + gv[i];
        wv[i] = a * vv[i] + (1 - a) * gr;
        wh[i] = b * hv[i] + (1 - b) * gr * gr;
        double r = 0.1f * sqrt(1 - pow(b, 3)) / (1 - pow(a, 3));
        wx[i] = (1 - 0.02f) * (xv[i] - r * wv[i] / (sqrt(wh[i]) + 1e-3f));
    }
    check_close("Adam X_new (T 3, both norm coefficients)", out[0], wx, 3, 1e-6);
    check_close("Adam V_new", out[1], wv, 3, 1e-6);
    check_close("Adam H_new", out[2], wh, 3, 1e-6);
    free_all(3, out), otter_node_free(n);
    n = mknode("Momentum", PRV, 5, 0, 2, 0);
    otter_node_set_attr_float(n, "alpha", 0.9f), otter_node_set_attr_float(n, "beta", 0.5f);
    otter_node_set_attr_float(n, "norm_coefficient", 0.01f), otter_node_set_attr_string(n, "mode", "nesterov");
    CHECK_OK(run_node(n, 17, 5, in, 2, out));
    for (int i = 0; i < 3; i++) {
        double gr = 0.01f * xv[i] + gv[i];
        wv[i] = 0.9f * vv[i] + 0.5 * gr;
        wx[i] = xv[i] - 0.1f * (gr + 0.9f * wv[i]);
    }
    check_close("Momentum nesterov X_new", out[0], wx, 3, 1e-6);
    check_close("Momentum nesterov V_new", out[1], wv, 3, 1e-6);
    free_all(2, out), otter_node_free(n);
    n = mknode("Adagrad", PRV, 5, 0, 2, 0);
    otter_node_set_attr_float(n, "decay_factor", 0.1f), otter_node_set_attr_float(n, "epsilon", 1e-2f);
    otter_tensor *ain[5] = {R, T, X, G, H};
    CHECK_OK(run_node(n, 17, 5, ain, 2, out));
    for (int i = 0; i < 3; i++) {
        double r = 0.1f / (1 + 3 * 0.1f);
        wh[i] = hv[i] + (double)gv[i] * gv[i];
        wx[i] = xv[i] - r * gv[i] / (sqrt(wh[i]) + 1e-2f);
    }
    check_close("Adagrad X_new (decay 0.1, T 3)", out[0], wx, 3, 1e-6);
    check_close("Adagrad H_new", out[1], wh, 3, 1e-6);
    free_all(2, out), otter_node_free(n);
    otter_tensor *all[6] = {R, T, X, G, V, H};
    free_all(6, all);
}

int main(void) {
    test_accumulators();
    test_activations();
    test_clip_grad();
    test_softmax();
    test_layernorm();
    test_batchnorm();
    test_dropout_grad();
    test_conv();
    test_maxpool_indices();
    test_maxpool_windows();
    test_global_avgpool();
    test_pool();
    test_indexing();
    test_losses();
    test_misc();
    test_adamw();
    test_preview();
    return tu_finish("test_training_ops");
}
