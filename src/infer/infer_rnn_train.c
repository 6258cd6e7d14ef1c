/* Shape inference for the recurrent layers' training operators: com.microsoft LSTMTraining and
 * GRUTraining (the layer's outputs plus all-steps tensors shaped like Y: LSTM's CAll [.., H] and
 * IOFC [.., 4H], GRU's ZRH [.., 3H]), and the gradient operators LSTMGrad, GRUGrad and com.otter
 * RNNGrad, whose outputs are shaped like the inputs they differentiate. The kernels are in
 * runtime/ops/rnn.c and rnn_train.c. */
#include <string.h>

#include "infer/infer_internal.h"

/* Outputs 0..n_state of the layer (Y, Y_h[, Y_c]), then the all-steps outputs with gates * H
 * values per row (from index first_extra). The layout attribute is read whatever the domain's
 * opset, since these operators take the ai.onnx layer's attributes. */
static otter_status infer_training(ot_inode *n, int gates, size_t first_extra) {
    otter_dtype dt = ot_in_dtype(n, 0);
    for (size_t i = 0; i < n->n_out; i++) ot_out_type(n, i, dt);
    int64_t layout = ot_attr_int(n, "layout", 0), hidden = ot_attr_int(n, "hidden_size", -1);
    ot_idim dirs = ot_dim_known(strcmp(ot_attr_str(n, "direction", "forward"), "bidirectional") == 0 ? 2 : 1);
    ot_idim h = hidden > 0 ? ot_dim_known(hidden) : OT_DIM_UNKNOWN, seq = OT_DIM_UNKNOWN, batch = OT_DIM_UNKNOWN;
    ot_idim w_rows = ot_in_dim(n, 1, 1);
    if (hidden <= 0 && ot_dim_is_known(w_rows)) h = ot_dim_known(w_rows.v / gates);
    if (ot_in_has_shape(n, 0)) {
        if (ot_in(n, 0)->rank != 3)
            return ot_inf_fail(n, OTTER_ERR_INVALID, "input '%s' must have rank 3", n->node->inputs[0]);
        seq = ot_in(n, 0)->dims[layout ? 1 : 0];
        batch = ot_in(n, 0)->dims[layout ? 0 : 1];
    }
    ot_idim y[4] = {seq, dirs, batch, h};
    if (layout) y[0] = batch, y[1] = seq, y[2] = dirs;
    ot_idim state[3] = {dirs, batch, h};
    if (layout) state[0] = batch, state[1] = dirs;
    for (size_t i = 0; i < n->n_out; i++) {
        if (ot_str_empty(n->node->outputs[i])) continue;
        if (i == 0 || i >= first_extra) {
            ot_idim d[4] = {y[0], y[1], y[2], y[3]};
            if (i == n->n_out - 1 && i >= first_extra) /* the gates, the last output */
                d[3] = ot_dim_is_known(h) ? ot_dim_known(h.v * gates) : OT_DIM_UNKNOWN;
            OT_TRY(ot_out_shape(n, i, dt, 4, d));
        } else {
            OT_TRY(ot_out_shape(n, i, dt, 3, state));
        }
    }
    return OTTER_OK;
}

otter_status ot_infer_lstm_training(ot_inode *n) { return infer_training(n, 4, 3); }
otter_status ot_infer_gru_training(ot_inode *n) { return infer_training(n, 3, 2); }

/* The gradient operators: output i is shaped like input from[i]. */
static otter_status infer_grad(ot_inode *n, const size_t *from, size_t count) {
    for (size_t i = 0; i < n->n_out && i < count; i++)
        if (!ot_str_empty(n->node->outputs[i]) && ot_in(n, from[i])) OT_TRY(ot_out_like(n, i, from[i]));
    return OTTER_OK;
}

/* dX, dW, dR, dB, dH0 (, dC0, dP): X, W, R, B, initial_h (, initial_c, P) */
otter_status ot_infer_lstm_grad(ot_inode *n) { return infer_grad(n, (const size_t[]){0, 1, 2, 3, 5, 6, 7}, 7); }
otter_status ot_infer_gru_grad(ot_inode *n) { return infer_grad(n, (const size_t[]){0, 1, 2, 3, 5}, 5); }
