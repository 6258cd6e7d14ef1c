/* ai.onnx.preview.training::Gradient(xs..., zs...) -> d y / d xs: ONNX's in-graph gradient
 * operator, run through otter's gradient builder.
 *
 * The kernel builds, from the node's model, the forward graph fed by xs and zs, appends the
 * gradient of y with respect to xs, and runs it on the node's inputs. The gradient model depends
 * only on the input shapes, so a model with one Gradient node builds it once per shape in
 * practice; the kernel keeps no state between runs. */
#include <string.h>

#include "core/core.h"
#include "otter/autodiff.h"
#include "otter/edit.h"
#include "otter/runtime.h"
#include "runtime/op.h"
#include "runtime/ops/kernels.h"

static bool is_gradient_node(const otter_node *n) {
    return ot_streq(n->op_type, "Gradient") && ot_streq(n->domain, "ai.onnx.preview.training");
}

/* The forward model: the node's model without Gradient nodes, with inputs xs + zs typed by the
 * tensors given, and outputs the gradients of y with respect to xs. */
static otter_status gradient_model(ot_kernel_ctx *ctx, const otter_attr *xs, const otter_attr *zs, const char *y,
                                   otter_model **out) {
    otter_model *m;
    OT_TRY(otter_model_clone(&m, ctx->model));
    otter_graph *g = m->graph;
    otter_status s = OTTER_OK;
    for (size_t i = g->n_nodes; i-- > 0;)
        if (is_gradient_node(g->nodes[i])) {
            otter_node_free(g->nodes[i]);
            memmove(&g->nodes[i], &g->nodes[i + 1], (g->n_nodes - i - 1) * sizeof *g->nodes);
            g->n_nodes--;
        }
    while (g->n_inputs && s == OTTER_OK) s = otter_graph_delete_input(g, g->inputs[0].name);
    while (g->n_outputs && s == OTTER_OK) s = otter_graph_delete_output(g, g->outputs[0].name);
    size_t n_names = xs->n_strings + (zs ? zs->n_strings : 0);
    for (size_t i = 0; i < n_names && s == OTTER_OK; i++) {
        const char *name = i < xs->n_strings ? xs->strings[i].data : zs->strings[i - xs->n_strings].data;
        const otter_tensor *t = ot_ctx_input(ctx, i);
        if (!t)
            s = ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu ('%s') is missing", i, name);
        else
            s = otter_graph_add_input(g, name, t->dtype, t->rank, t->dims, NULL);
    }
    otter_grad_options go = {.loss = y, .n_wrt = xs->n_strings};
    const char **wrt = ot_calloc(xs->n_strings + 1, sizeof *wrt);
    if (s == OTTER_OK && !wrt) s = OT_NOMEM();
    for (size_t i = 0; s == OTTER_OK && i < xs->n_strings; i++) wrt[i] = xs->strings[i].data;
    go.wrt = wrt;
    if (s == OTTER_OK) s = otter_model_add_gradients(m, &go);
    g = m->graph; /* the builder replaced the graph */
    for (size_t i = 0; s == OTTER_OK && i < xs->n_strings; i++) {
        char *grad = ot_sprintf("%s_grad", xs->strings[i].data);
        s = grad ? otter_graph_add_output(g, grad, ot_ctx_input(ctx, i)->dtype, -1, NULL, NULL) : OT_NOMEM();
        ot_free(grad);
    }
    if (s == OTTER_OK) s = otter_graph_clean(g, NULL);
    ot_free(wrt);
    if (s != OTTER_OK) {
        otter_model_free(m);
        return s;
    }
    *out = m;
    return OTTER_OK;
}

otter_status ot_kernel_gradient(ot_kernel_ctx *ctx) {
    const otter_attr *xs = otter_node_attr(ctx->node, "xs");
    const otter_attr *zs = otter_node_attr(ctx->node, "zs");
    const char *y = otter_node_attr_string(ctx->node, "y", NULL);
    if (!xs || xs->type != OTTER_ATTR_STRINGS || !y)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "needs attributes xs (strings) and y (string)");
    if (ctx->n_outputs != xs->n_strings)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "has %zu outputs for %zu tensors in xs", ctx->n_outputs,
                            xs->n_strings);
    otter_model *m;
    otter_status s = gradient_model(ctx, xs, zs, y, &m);
    if (s != OTTER_OK) return ot_ctx_error(ctx, s, "building the gradient of '%s': %s", y, otter_last_error());
    otter_session *sess = NULL;
    otter_session_options o = {.n_threads = 1};
    otter_tensor **grads = ot_calloc(ctx->n_outputs + 1, sizeof *grads);
    s = grads ? otter_session_create(&sess, m, &o) : OT_NOMEM();
    if (s == OTTER_OK)
        s = otter_session_run(sess, ctx->n_inputs, NULL, (const otter_tensor *const *)ctx->inputs, ctx->n_outputs, NULL,
                              grads);
    for (size_t i = 0; s == OTTER_OK && i < ctx->n_outputs; i++) {
        otter_tensor *o_i = ot_ctx_output(ctx, i, grads[i]->dtype, grads[i]->rank, grads[i]->dims);
        if (!o_i)
            s = ctx->output_status;
        else
            memcpy(o_i->data, grads[i]->data, otter_tensor_nbytes(grads[i]));
    }
    for (size_t i = 0; grads && i < ctx->n_outputs; i++) otter_tensor_free(grads[i]);
    ot_free(grads);
    otter_session_free(sess);
    otter_model_free(m);
    return s == OTTER_OK ? OTTER_OK : ot_ctx_error(ctx, s, "%s", otter_last_error());
}
