/* LayerNormalization in the default domain below opset 17, as ONNX Runtime's training artifacts
 * write it (its fused transformer graphs use LayerNormalization at opset 14, a contrib schema
 * registered since version 1). The model loss = ReduceSum(LayerNormalization(x, scale, bias) * w)
 * at opset 14 must pass the checker (with full_check), run and match a double-precision
 * reference, and its gradients (d loss / d x, scale, bias) must match central differences. The
 * same node without its scale input is refused naming the node and the rule. */
#include <math.h>
#include <string.h>

#include "otter/autodiff.h"
#include "otter/check.h"
#include "otter/runtime.h"
#include "testutil.h"

enum { ROWS = 3, COLS = 5 };

static const int64_t x_dims[] = {ROWS, COLS}, v_dims[] = {COLS};

static otter_model *make_model(int64_t opset, bool with_scale) {
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "ln_ort", opset));
    m->ir_version = 7; /* what ONNX Runtime writes at opset 14 */
    otter_graph *g = m->graph;
    CHECK_OK(otter_graph_add_input(g, "x", OTTER_DTYPE_FLOAT, 2, x_dims, NULL));
    CHECK_OK(otter_graph_add_input(g, "scale", OTTER_DTYPE_FLOAT, 1, v_dims, NULL));
    CHECK_OK(otter_graph_add_input(g, "bias", OTTER_DTYPE_FLOAT, 1, v_dims, NULL));
    CHECK_OK(otter_graph_add_input(g, "w", OTTER_DTYPE_FLOAT, 2, x_dims, NULL));
    otter_node *ln = tu_add_node(g, "LayerNormalization", "ln", with_scale ? "x scale bias" : "x", "y");
    CHECK_OK(otter_node_set_attr_int(ln, "axis", -1));
    CHECK_OK(otter_node_set_attr_float(ln, "epsilon", 1e-5f));
    tu_add_node(g, "Mul", "weigh", "y w", "yw");
    otter_node *sum = tu_add_node(g, "ReduceSum", "sum", "yw", "loss");
    CHECK_OK(otter_node_set_attr_int(sum, "keepdims", 0));
    CHECK_OK(otter_graph_add_output(g, "loss", OTTER_DTYPE_FLOAT, 0, NULL, NULL));
    return m;
}

/* The loss in double precision. */
static double reference_loss(const float *x, const float *scale, const float *bias, const float *w) {
    double loss = 0;
    for (int r = 0; r < ROWS; r++) {
        double mean = 0, var = 0;
        for (int c = 0; c < COLS; c++) mean += x[r * COLS + c];
        mean /= COLS;
        for (int c = 0; c < COLS; c++) var += (x[r * COLS + c] - mean) * (x[r * COLS + c] - mean);
        var /= COLS;
        for (int c = 0; c < COLS; c++) {
            double y = (x[r * COLS + c] - mean) / sqrt(var + 1e-5) * scale[c] + bias[c];
            loss += y * w[r * COLS + c];
        }
    }
    return loss;
}

static otter_tensor *filled(const char *name, int rank, const int64_t *dims, float base, float step) {
    otter_tensor *t = NULL;
    CHECK_OK(otter_tensor_create(&t, name, OTTER_DTYPE_FLOAT, rank, dims));
    float *d = t->data;
    for (int64_t i = 0; i < otter_tensor_numel(t); i++) d[i] = base + step * (float)((i * 7) % 11) - 0.3f * (i % 2);
    return t;
}

static double run_loss(otter_session *s, otter_tensor *const *in) {
    static const char *names[] = {"x", "scale", "bias", "w"};
    otter_tensor *out = NULL;
    const char *out_name = "loss";
    CHECK_OK(otter_session_run(s, 4, names, (const otter_tensor *const *)in, 1, &out_name, &out));
    double v = out ? ((const float *)out->data)[0] : NAN;
    otter_tensor_free(out);
    return v;
}

static void check_model_valid(otter_model *m) {
    otter_check_options o = {.full_check = true};
    otter_status s = otter_model_check(m, &o);
    printf("otter check (full) of LayerNormalization at opset 14: %s\n", s == OTTER_OK ? "valid" : otter_last_error());
    CHECK(s == OTTER_OK);
}

static void check_refused_without_scale(void) {
    otter_model *m = make_model(14, false);
    otter_check_report *r = NULL;
    CHECK_OK(otter_check_report_create(&r));
    otter_check_options o = {.report = r};
    CHECK_STATUS(otter_model_check(m, &o), OTTER_ERR_INVALID);
    const char *msg = otter_check_report_message(r, 0);
    printf("without scale: %s\n", msg ? msg : "(accepted)");
    CHECK(msg && strstr(msg, "node 'ln' (LayerNormalization): has 1 inputs, expected 2 to 3") != NULL);
    otter_check_report_free(r);
    otter_model_free(m);
}

int main(void) {
    otter_model *fwd = make_model(14, true);
    check_model_valid(fwd);
    otter_tensor *in[4] = {filled("x", 2, x_dims, -0.8f, 0.17f), filled("scale", 1, v_dims, 0.6f, 0.11f),
                           filled("bias", 1, v_dims, -0.2f, 0.09f), filled("w", 2, x_dims, -0.5f, 0.13f)};

    otter_session_options so = {.n_threads = 1};
    otter_session *sf = NULL;
    CHECK_OK(otter_session_create(&sf, fwd, &so));
    double got = run_loss(sf, in);
    double want = reference_loss(in[0]->data, in[1]->data, in[2]->data, in[3]->data);
    printf("loss at opset 14: %.6f, reference %.6f\n", got, want);
    CHECK(fabs(got - want) <= 1e-4 * (1 + fabs(want)));

    /* Gradients as ONNX graphs, against central differences of the forward model. */
    otter_model *bwd = NULL;
    CHECK_OK(otter_model_clone(&bwd, fwd));
    const char *wrt[] = {"x", "scale", "bias"};
    otter_grad_options go = {.loss = "loss", .n_wrt = 3, .wrt = wrt};
    CHECK_OK(otter_model_add_gradients(bwd, &go));
    const char *grad_names[] = {"x_grad", "scale_grad", "bias_grad"};
    for (int k = 0; k < 3; k++)
        CHECK_OK(otter_graph_add_output(bwd->graph, grad_names[k], OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    otter_session *sb = NULL;
    CHECK_OK(otter_session_create(&sb, bwd, &so));
    static const char *names[] = {"x", "scale", "bias", "w"};
    otter_tensor *grads[3] = {NULL};
    CHECK_OK(otter_session_run(sb, 4, names, (const otter_tensor *const *)in, 3, grad_names, grads));
    double worst = 0;
    size_t compared = 0;
    const float eps = 1e-2f;
    for (int k = 0; k < 3; k++) {
        if (!grads[k] || otter_tensor_numel(grads[k]) != otter_tensor_numel(in[k])) {
            CHECK(!"gradient has the input's size");
            continue;
        }
        float *v = in[k]->data;
        for (int64_t e = 0; e < otter_tensor_numel(in[k]); e++) {
            float keep = v[e];
            v[e] = keep + eps;
            double lp = run_loss(sf, in);
            v[e] = keep - eps;
            double lm = run_loss(sf, in);
            v[e] = keep;
            double num = (lp - lm) / (2.0 * eps), ana = ((const float *)grads[k]->data)[e];
            worst = tu_worse(worst, fabs(ana - num) / (1.0 + fabs(num)));
            compared++;
        }
    }
    printf("gradients at opset 14: %zu elements, worst relative error %.2e\n", compared, worst);
    CHECK(compared == ROWS * COLS + 2 * COLS && worst < 1e-2);

    check_refused_without_scale();
    for (int k = 0; k < 3; k++) otter_tensor_free(grads[k]);
    for (int k = 0; k < 4; k++) otter_tensor_free(in[k]);
    otter_session_free(sb);
    otter_session_free(sf);
    otter_model_free(bwd);
    otter_model_free(fwd);
    return tu_finish("test_layernorm_ort");
}
