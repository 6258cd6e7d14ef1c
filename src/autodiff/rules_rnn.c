/* Gradient rules for the recurrent layers, as ONNX Runtime builds them: LSTM and GRU become
 * com.microsoft LSTMTraining / GRUTraining, the same forward pass that also outputs what the
 * backward pass reads (all cell states and gate activations), and their gradients are one
 * com.microsoft LSTMGrad / GRUGrad node taking the forward node's inputs, those outputs and the
 * outputs' gradients. ORT has no RNN gradient; com.otter RNNGrad follows GRUGrad's signature with
 * RNN's own Y in place of HAll and no gate tensor (Y holds every activation). The kernels
 * (runtime/ops/rnn_train.c) handle every direction, sequence_lens, layout, peepholes and
 * activation and clip otter's forward pass does. */
#include <string.h>

#include "autodiff/grad.h"
#include "core/core.h"

static const char *input_or_empty(const otter_node *n, size_t i) { return i < n->n_inputs ? n->inputs[i] : ""; }

static const char *dy_or_empty(ot_grad *g, size_t i) {
    const char *dy = ot_grad_dy(g, i);
    return dy ? dy : "";
}

/* Input i's gradient name, or "" when it has none to receive. */
static const char *dx_or_empty(ot_grad *g, const otter_node *n, size_t i) {
    const char *dx = i < n->n_inputs && n->inputs[i][0] ? ot_grad_dx(g, i) : NULL;
    return dx ? dx : "";
}

/* Give the node the hidden_size attribute ORT's training kernels require, when W's shape tells it. */
static bool prepare(ot_grad *g, otter_node *n, int gates) {
    const otter_type *w = ot_grad_type(g, n->inputs[1]);
    if (!otter_node_attr(n, "hidden_size") && w && w->rank == 3 && w->dims[1].value > 0 &&
        otter_node_set_attr_int(n, "hidden_size", w->dims[1].value / gates) != OTTER_OK) {
        ot_grad_fail(g, OTTER_ERR_NOMEM, "out of memory building gradients");
        return false;
    }
    return true;
}

/* Turn the forward node into its training version (com.microsoft `op`). */
static bool become_training(ot_grad *g, otter_node *n, const char *op) {
    char *name = ot_strdup(op);
    if (!name || otter_node_set_domain(n, "com.microsoft") != OTTER_OK) {
        ot_free(name);
        ot_grad_fail(g, OTTER_ERR_NOMEM, "out of memory building gradients");
        return false;
    }
    ot_free(n->op_type);
    n->op_type = name;
    return true;
}

void ot_grad_lstm(ot_grad *g, otter_node *n) {
    if (!prepare(g, n, 4)) return;
    /* the output gradients first: ot_grad_dy reads the node's outputs as the forward pass named them */
    const char *dy = dy_or_empty(g, 0), *dyh = dy_or_empty(g, 1), *dyc = dy_or_empty(g, 2);
    const char *hall = ot_grad_forward_output(g, n, 0, "HAll");
    const char *call = ot_grad_forward_output(g, n, 3, "CAll");
    const char *iofc = ot_grad_forward_output(g, n, 4, "IOFC");
    if (!hall || !call || !iofc || !become_training(g, n, "LSTMTraining")) return;
    const char *ins[14];
    for (size_t i = 0; i < 8; i++) ins[i] = input_or_empty(n, i);
    ins[8] = hall;
    ins[9] = call;
    ins[10] = iofc;
    ins[11] = dy;
    ins[12] = dyh;
    ins[13] = dyc;
    static const size_t diff[] = {0, 1, 2, 3, 5, 6, 7}; /* all but sequence_lens */
    const char *outs[7];
    for (size_t i = 0; i < 7; i++) outs[i] = dx_or_empty(g, n, diff[i]);
    otter_node *x = ot_grad_emit(g, "LSTMGrad", "com.microsoft", 14, ins, 7, outs);
    ot_grad_copy_attrs(g, x, n);
}

void ot_grad_gru(ot_grad *g, otter_node *n) {
    if (!prepare(g, n, 3)) return;
    const char *dy = dy_or_empty(g, 0), *dyh = dy_or_empty(g, 1);
    const char *hall = ot_grad_forward_output(g, n, 0, "HAll");
    const char *zrh = ot_grad_forward_output(g, n, 2, "ZRH");
    if (!hall || !zrh || !become_training(g, n, "GRUTraining")) return;
    const char *ins[10];
    for (size_t i = 0; i < 6; i++) ins[i] = input_or_empty(n, i);
    ins[6] = hall;
    ins[7] = zrh;
    ins[8] = dy;
    ins[9] = dyh;
    static const size_t diff[] = {0, 1, 2, 3, 5};
    const char *outs[5];
    for (size_t i = 0; i < 5; i++) outs[i] = dx_or_empty(g, n, diff[i]);
    otter_node *x = ot_grad_emit(g, "GRUGrad", "com.microsoft", 10, ins, 5, outs);
    ot_grad_copy_attrs(g, x, n);
}

void ot_grad_rnn(ot_grad *g, otter_node *n) {
    if (!prepare(g, n, 1)) return;
    const char *dy = dy_or_empty(g, 0), *dyh = dy_or_empty(g, 1);
    const char *y = ot_grad_forward_output(g, n, 0, "Y");
    if (!y) return;
    const char *ins[9];
    for (size_t i = 0; i < 6; i++) ins[i] = input_or_empty(n, i);
    ins[6] = y;
    ins[7] = dy;
    ins[8] = dyh;
    static const size_t diff[] = {0, 1, 2, 3, 5};
    const char *outs[5];
    for (size_t i = 0; i < 5; i++) outs[i] = dx_or_empty(g, n, diff[i]);
    otter_node *x = ot_grad_emit(g, "RNNGrad", "com.otter", 9, ins, 5, outs);
    ot_grad_copy_attrs(g, x, n);
}
