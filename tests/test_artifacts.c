/* Training artifacts: ORT's layout (input/output order and names, opsets, optimizer model,
 * checkpoint), the seeds' custom loss 0.4 * mse(out1, t1) + 0.6 * mse(out2, t2) built with blocks in
 * a few lines, and the training graph's accumulated gradients against finite differences of the
 * eval graph's loss. An invalid model (an initializer that a node also writes) is refused. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "otter/otter.h"
#include "testutil.h"

static void check_layout(void) {
    otter_model *m;
    CHECK_OK(otter_model_mnist_dnn(&m, 7));
    const char *extra[] = {"output"};
    otter_artifacts_options o = {
        .loss = OTTER_LOSS_CROSS_ENTROPY, .n_additional_outputs = 1, .additional_outputs = extra};
    otter_artifacts a;
    CHECK_OK(otter_artifacts_build(&a, m, &o));
    const otter_graph *tg = a.training->graph;
    static const char *want_inputs[] = {"input",
                                        "labels",
                                        "fc1.weight",
                                        "fc1.bias",
                                        "fc2.weight",
                                        "fc2.bias",
                                        "fc3.weight",
                                        "fc3.bias",
                                        "fc1.weight_grad.accumulation.buffer",
                                        "fc1.bias_grad.accumulation.buffer",
                                        "fc2.weight_grad.accumulation.buffer",
                                        "fc2.bias_grad.accumulation.buffer",
                                        "fc3.weight_grad.accumulation.buffer",
                                        "fc3.bias_grad.accumulation.buffer",
                                        "lazy_reset_grad"};
    CHECK(tg->n_inputs == 15);
    for (size_t i = 0; i < tg->n_inputs && i < 15; i++) CHECK(strcmp(tg->inputs[i].name, want_inputs[i]) == 0);
    CHECK(tg->inputs[1].type.elem_type == OTTER_DTYPE_INT64 && tg->inputs[1].type.rank == 1);
    CHECK(tg->inputs[14].type.elem_type == OTTER_DTYPE_BOOL);
    CHECK(tg->n_outputs == 8 && strcmp(tg->outputs[1].name, "output") == 0);
    CHECK(strcmp(tg->outputs[2].name, "fc1.weight_grad.accumulation.out") == 0);
    CHECK(otter_model_opset(a.training, "com.microsoft") == 1 && otter_model_opset(a.training, "ai.onnx.ml") == 5);
    /* Parameters are graph inputs, not initializers, in every model. */
    CHECK(otter_graph_find_initializer(tg, "fc1.weight") < 0);
    const otter_graph *eg = a.eval->graph;
    CHECK(eg->n_inputs == 8 && eg->n_outputs == 2);
    for (size_t i = 0; i < eg->n_inputs && i < 8; i++) CHECK(strcmp(eg->inputs[i].name, want_inputs[i]) == 0);
    CHECK(otter_model_opset(a.eval, "com.microsoft") == 0);
    const otter_graph *og = a.optimizer->graph;
    static const char *opt_inputs[] = {"learning_rate",       "step", "params", "gradients", "first_order_moments",
                                       "second_order_moments"};
    CHECK(og->n_inputs == 6);
    for (size_t i = 0; i < og->n_inputs && i < 6; i++) CHECK(strcmp(og->inputs[i].name, opt_inputs[i]) == 0);
    CHECK(og->inputs[2].type.kind == OTTER_TYPE_SEQUENCE);
    CHECK(og->n_nodes == 1 && strcmp(og->nodes[0]->op_type, "AdamWOptimizer") == 0);
    CHECK(otter_node_attr_int(og->nodes[0], "adam_mode", -1) == 1);
    CHECK(og->outputs[0].type.elem_type == OTTER_DTYPE_BOOL);
    size_t floats = 0;
    for (size_t i = 0; i < otter_checkpoint_param_count(a.checkpoint, OTTER_PARAM_TRAINABLE); i++)
        floats += (size_t)otter_tensor_numel(otter_checkpoint_param_at(a.checkpoint, OTTER_PARAM_TRAINABLE, i));
    CHECK(floats == 199210);
    CHECK(strcmp(otter_checkpoint_param_at(a.checkpoint, OTTER_PARAM_TRAINABLE, 0)->name, "fc1.weight") == 0);
    printf("layout: training %zu inputs / %zu outputs, eval %zu / %zu, checkpoint %zu floats\n", tg->n_inputs,
           tg->n_outputs, eg->n_inputs, eg->n_outputs, floats);
    otter_artifacts_free(&a);

    /* A name both trainable and frozen is an argument error; an unknown one is named. */
    const char *both[] = {"fc1.bias"};
    otter_artifacts_options bad = {
        .loss = OTTER_LOSS_MSE, .n_requires_grad = 1, .requires_grad = both, .n_frozen = 1, .frozen = both};
    CHECK_STATUS(otter_artifacts_build(&a, m, &bad), OTTER_ERR_ARGUMENT);
    const char *nope[] = {"fc9.weight"};
    otter_artifacts_options bad2 = {.loss = OTTER_LOSS_MSE, .n_requires_grad = 1, .requires_grad = nope};
    CHECK_STATUS(otter_artifacts_build(&a, m, &bad2), OTTER_ERR_NOT_FOUND);
    CHECK(strstr(otter_last_error(), "fc9.weight") != NULL);
    otter_model_free(m);
}

/* The seeds' custom loss over a two-output model. */
static const char *weighted_mse(otter_builder *b, size_t n, const char *const *outs, void *user) {
    (void)n;
    (void)user;
    const char *l1 = otter_block_mse_loss(b, outs[0], "target1", OTTER_REDUCE_MEAN);
    const char *l2 = otter_block_mse_loss(b, outs[1], "target2", OTTER_REDUCE_MEAN);
    return otter_block_add(b, otter_block_mul(b, otter_block_constant(b, 0.4f), l1),
                           otter_block_mul(b, otter_block_constant(b, 0.6f), l2));
}

static otter_model *two_output_model(void) {
    otter_model *m;
    CHECK_OK(otter_model_create(&m, "two_heads", 14));
    otter_builder *b;
    CHECK_OK(otter_builder_create(&b, m, 3));
    int64_t dims[2] = {-1, 5};
    const char *x = otter_block_input(b, "x", OTTER_DTYPE_FLOAT, 2, dims);
    const char *h = otter_block_relu(b, otter_block_linear(b, "shared", x, 5, 6));
    otter_block_output(b, otter_block_linear(b, "head1", h, 6, 3), "out1");
    otter_block_output(b, otter_block_sigmoid(b, otter_block_linear(b, "head2", h, 6, 2)), "out2");
    CHECK_OK(otter_builder_finish(b));
    return m;
}

static otter_tensor *filled(const char *name, otter_dtype dt, int rank, const int64_t *dims, float scale,
                            unsigned seed) {
    otter_tensor *t;
    CHECK_OK(otter_tensor_create(&t, name, dt, rank, dims));
    for (int64_t i = 0; i < otter_tensor_numel(t); i++) {
        seed = seed * 1103515245u + 12345u;
        float v = ((float)((seed >> 8) & 0xffff) / 65535.0f - 0.5f) * scale;
        if (dt == OTTER_DTYPE_FLOAT)
            ((float *)t->data)[i] = v;
        else if (dt == OTTER_DTYPE_BOOL)
            ((uint8_t *)t->data)[i] = 1;
    }
    return t;
}

/* Run the training graph once (lazy reset: buffers overwritten) and compare each accumulated
 * gradient with central differences of the eval graph's loss. */
static void check_custom_loss_gradients(void) {
    otter_model *m = two_output_model();
    otter_artifacts_options o = {.loss = OTTER_LOSS_NONE, .custom_loss = weighted_mse, .optimizer = OTTER_OPTIM_SGD};
    otter_artifacts a;
    CHECK_OK(otter_artifacts_build(&a, m, &o));
    otter_model_free(m);
    const otter_graph *tg = a.training->graph;
    /* user inputs: x, target1, target2 */
    CHECK(tg->n_inputs > 3 && strcmp(tg->inputs[1].name, "target1") == 0 && strcmp(tg->inputs[2].name, "target2") == 0);
    size_t n_in = tg->n_inputs;
    otter_tensor **vals = calloc(n_in, sizeof *vals);
    const char **names = calloc(n_in, sizeof *names);
    int64_t bx[2] = {4, 5}, b1[2] = {4, 3}, b2[2] = {4, 2}, one = 1;
    for (size_t i = 0; i < n_in; i++) {
        const char *name = tg->inputs[i].name;
        names[i] = name;
        const otter_tensor *p;
        if (i == 0)
            vals[i] = filled(name, OTTER_DTYPE_FLOAT, 2, bx, 2.0f, 11);
        else if (i == 1)
            vals[i] = filled(name, OTTER_DTYPE_FLOAT, 2, b1, 2.0f, 12);
        else if (i == 2)
            vals[i] = filled(name, OTTER_DTYPE_FLOAT, 2, b2, 1.0f, 13);
        else if (otter_checkpoint_get_param(a.checkpoint, name, &p, NULL) == OTTER_OK)
            CHECK_OK(otter_tensor_clone(&vals[i], p));
        else if (strcmp(name, "lazy_reset_grad") == 0)
            vals[i] = filled(name, OTTER_DTYPE_BOOL, 1, &one, 1, 0);
        else {
            /* an accumulation buffer, shaped like its parameter */
            char pname[128];
            snprintf(pname, sizeof pname, "%.*s", (int)(strstr(name, "_grad.accumulation.buffer") - name), name);
            CHECK_OK(otter_checkpoint_get_param(a.checkpoint, pname, &p, NULL));
            CHECK_OK(otter_tensor_create(&vals[i], name, OTTER_DTYPE_FLOAT, p->rank, p->dims));
        }
    }
    otter_session_options so = {.n_threads = 1, .no_fold_initializers = true};
    otter_session *st = NULL, *se = NULL;
    CHECK_OK(otter_session_create(&st, a.training, &so));
    CHECK_OK(otter_session_create(&se, a.eval, &so));
    if (!st || !se) goto done;
    otter_tensor *loss = NULL;
    const char *loss_name = tg->outputs[0].name;
    CHECK_OK(otter_session_run(st, n_in, names, (const otter_tensor *const *)vals, 1, &loss_name, &loss));
    /* Eval inputs: x, targets, params (the first eval-model inputs). */
    size_t n_eval = a.eval->graph->n_inputs;
    double worst = 0;
    size_t compared = 0;
    const float eps = 1e-2f;
    for (size_t i = 3; i < n_eval; i++) {
        char bname[160];
        snprintf(bname, sizeof bname, "%s_grad.accumulation.buffer", names[i]);
        size_t bi = 0;
        while (bi < n_in && strcmp(names[bi], bname) != 0) bi++;
        CHECK(bi < n_in);
        if (bi >= n_in) continue;
        float *w = vals[i]->data, *g = vals[bi]->data;
        for (int64_t e = 0; e < otter_tensor_numel(vals[i]); e++) {
            float keep = w[e];
            double l[2];
            for (int k = 0; k < 2; k++) {
                w[e] = keep + (k ? -eps : eps);
                otter_tensor *out = NULL;
                CHECK_OK(otter_session_run(se, n_eval, names, (const otter_tensor *const *)vals, 1, &loss_name, &out));
                l[k] = out ? *(float *)out->data : NAN;
                otter_tensor_free(out);
            }
            w[e] = keep;
            double num = (l[0] - l[1]) / (2 * eps);
            worst = tu_worse(worst, fabs(num - g[e]) / (1 + fabs(num)));
            compared++;
        }
    }
    CHECK(compared > 50 && worst < 1e-2);
    printf("custom loss 0.4*mse(out1,target1) + 0.6*mse(out2,target2): loss %.5f, %zu gradient elements vs "
           "finite differences, worst relative error %.2e\n",
           loss ? *(float *)loss->data : NAN, compared, worst);
    otter_tensor_free(loss);
done:
    otter_session_free(st);
    otter_session_free(se);
    for (size_t i = 0; i < n_in; i++) otter_tensor_free(vals[i]);
    free(vals);
    free(names);
    otter_artifacts_free(&a);
}

/* The MNIST DNN with an initializer named like fc1's output: two definitions of one tensor. */
static void check_invalid_model_refused(void) {
    otter_model *m;
    CHECK_OK(otter_model_mnist_dnn(&m, 7));
    const char *fc1_out = m->graph->nodes[0]->outputs[0];
    otter_tensor *t;
    CHECK_OK(otter_tensor_create(&t, fc1_out, OTTER_DTYPE_FLOAT, 1, (const int64_t[]){1}));
    CHECK_OK(otter_graph_add_initializer(m->graph, t));
    otter_artifacts a;
    otter_status s = otter_artifacts_build(&a, m, &(otter_artifacts_options){.loss = OTTER_LOSS_CROSS_ENTROPY});
    printf("initializer '%s' also a node output -> %s: %s\n", fc1_out, otter_status_name(s), otter_last_error());
    CHECK(s == OTTER_ERR_INVALID && strstr(otter_last_error(), "the model is not valid") &&
          strstr(otter_last_error(), "already defined"));
    otter_model_free(m);
}

int main(void) {
    check_invalid_model_refused();
    check_layout();
    check_custom_loss_gradients();
    return tu_finish("test_artifacts");
}
