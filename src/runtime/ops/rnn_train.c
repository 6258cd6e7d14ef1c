/* Training kernels of the recurrent layers, as ONNX Runtime names them: com.microsoft LSTMTraining
 * and GRUTraining (the forward pass that also outputs the cell states and gate activations, see
 * rnn.c), com.microsoft LSTMGrad and GRUGrad, and com.otter RNNGrad (ORT has no RNN gradient; it
 * takes GRUGrad's inputs without ZRH, since RNN's Y holds everything its gradient needs).
 *
 * Backpropagation through time, per direction, last step first. Each step finds the gradients of
 * the gates' pre-activations dA[b, G*H] from the recorded activations, then one GEMM dA R_d gives
 * the previous hidden state's gradient (GRU without linear_before_reset needs a second, H x H one
 * for r * H_prev). The per-step dA are kept for all steps, so the input side is one GEMM each over
 * all T * N rows: dX = dA W_d, dW_d = dA^T X, dR_d = dA^T H_prev; dB sums dA over rows.
 * With sequence_lens, step s of row b is at time s (forward) or len_b - 1 - s (reverse), as in the
 * forward pass; rows past their length pass their state's gradient through unchanged.
 * With clip, a gate whose pre-activation was clipped has a zero derivative: the recorded activation
 * then equals act(+-clip) rounded to the tensors' type, which an unclipped one only matches where
 * the activation is flat (zero derivative too) or within rounding of the bound.
 * It runs in the forward pass's working type (float, double for double tensors: rnn_backward.inc). */
#include <stdatomic.h>

#include "runtime/ops/broadcast.h"
#include "runtime/ops/rnn_internal.h"

otter_status ot_kernel_lstm_training(ot_kernel_ctx *ctx) { return ot_rnn_forward(ctx, OT_CELL_LSTM, true); }
otter_status ot_kernel_gru_training(ot_kernel_ctx *ctx) { return ot_rnn_forward(ctx, OT_CELL_GRU, true); }

/* Where each cell's gradient kernel finds its extra inputs (-1: not taken). */
typedef struct grad_inputs {
    int hall, call, gates, dy, dyh, dyc;
} grad_inputs;

static const grad_inputs GRAD_INPUTS[] = {
    [OT_CELL_RNN] = {6, -1, -1, 7, 8, -1},
    [OT_CELL_GRU] = {6, -1, 7, 8, 9, -1},
    [OT_CELL_LSTM] = {8, 9, 10, 11, 12, 13},
};

static otter_status check_dims(const ot_kernel_ctx *ctx, int i, const otter_tensor *t, int rank, const int64_t *dims) {
    bool ok = t->rank == rank && t->dtype == ot_ctx_input(ctx, 0)->dtype;
    for (int k = 0; ok && k < rank; k++) ok = t->dims[k] == dims[k];
    if (ok) return OTTER_OK;
    char got[128], want[128];
    return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %d '%s' is %s %s, expected %s %s", i, ot_ctx_input_name(ctx, i),
                        otter_dtype_name(t->dtype), ot_shape_str(got, sizeof got, t->rank, t->dims),
                        otter_dtype_name(ot_ctx_input(ctx, 0)->dtype), ot_shape_str(want, sizeof want, rank, dims));
}

/* Input i (an all-steps tensor with K values per row, or a state) into dst of type wt, zeros when
 * omitted. */
static otter_status read_input(const ot_kernel_ctx *ctx, int i, const ot_rnn_cfg *c, int64_t K, bool state,
                               otter_dtype wt, void *dst) {
    const otter_tensor *t = i >= 0 ? ot_ctx_input(ctx, (size_t)i) : NULL;
    int64_t n = (state ? 1 : c->T) * c->D * c->N * K;
    if (!t) {
        memset(dst, 0, (size_t)n * otter_dtype_size(wt));
        return OTTER_OK;
    }
    int64_t dims[4] = {c->T, c->D, c->N, K};
    if (c->layout) dims[0] = c->N, dims[1] = c->T, dims[2] = c->D;
    if (state) {
        dims[0] = c->layout ? c->N : c->D;
        dims[1] = c->layout ? c->D : c->N;
        dims[2] = K;
    }
    OT_TRY(check_dims(ctx, i, t, state ? 3 : 4, dims));
    if (state)
        ot_rnn_read_state(t, c, wt, dst);
    else
        ot_rnn_read_seq(t, c, K, wt, dst);
    return OTTER_OK;
}

static bool wanted(const ot_kernel_ctx *ctx, size_t i) {
    return i < ctx->n_outputs && ctx->node->outputs[i] && ctx->node->outputs[i][0];
}

static otter_status write_plain(ot_kernel_ctx *ctx, size_t i, int rank, const int64_t *dims, otter_dtype wt,
                                const void *src) {
    if (!wanted(ctx, i)) return OTTER_OK;
    otter_tensor *t = ot_ctx_output(ctx, i, ot_ctx_input(ctx, 0)->dtype, rank, dims);
    if (!t) return ctx->output_status;
    int64_t n = 1;
    for (int k = 0; k < rank; k++) n *= dims[k];
    ot_convert(t->data, t->dtype, src, wt, n);
    return OTTER_OK;
}

#define REAL         float
#define RNN_FN(name) name##_f32
#include "runtime/ops/rnn_backward.inc"
#undef REAL
#undef RNN_FN

#define REAL         double
#define RNN_FN(name) name##_f64
#include "runtime/ops/rnn_backward.inc"
#undef REAL
#undef RNN_FN

static otter_status rnn_grad(ot_kernel_ctx *ctx, ot_rnn_cell cell) {
    ot_rnn_cfg c;
    OT_TRY(ot_rnn_config(ctx, cell, &c));
    const grad_inputs *gi = &GRAD_INPUTS[cell];
    if (!ot_ctx_input(ctx, (size_t)gi->hall) || (gi->call >= 0 && !ot_ctx_input(ctx, (size_t)gi->call)) ||
        (gi->gates >= 0 && !ot_ctx_input(ctx, (size_t)gi->gates)))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "needs the forward pass's %s",
                            cell == OT_CELL_LSTM  ? "HAll, CAll and IOFC"
                            : cell == OT_CELL_GRU ? "HAll and ZRH"
                                                  : "Y");
    const otter_dtype dtype = ot_ctx_input(ctx, 0)->dtype, wt = ot_rnn_work_type(dtype);
    ot_rnn_inputs in;
    OT_TRY(ot_rnn_load(ctx, &c, wt, &in));
    const int64_t T = c.T, N = c.N, I = c.I, H = c.H, D = c.D, GH = c.G * H, TN = T * N;
    const size_t ws = otter_dtype_size(wt);
    double clipped[6][2] = {{0}};
    for (int k = 0; c.has_clip && k < c.n_act * (int)c.D; k++)
        for (int side = 0; side < 2; side++) { /* rounded as the recorded activations were */
            unsigned char v[sizeof(double)];
            ot_set_f64(v, dtype, 0, ot_rnn_act_apply(&c.acts[k], side ? c.clip : -c.clip));
            clipped[k][side] = ot_get_f64(v, dtype, 0);
        }
    char *seq = ot_ctx_scratch(ctx, (size_t)(T * D * N * (3 * H + GH) + 1) * ws);
    char *state = ot_ctx_scratch(ctx, (size_t)(2 * D * N * H + 1) * ws);
    size_t n_grads = (size_t)(TN * I + D * GH * (I + H + 2) + D * 3 * H);
    char *grads = ot_ctx_scratch(ctx, (n_grads + 1) * ws);
    if (!seq || !state || !grads) return OTTER_ERR_NOMEM;
    memset(grads, 0, n_grads * ws);
    char *hall = seq, *call = hall + (size_t)(T * D * N * H) * ws, *dy = call + (size_t)(T * D * N * H) * ws;
    char *gates = dy + (size_t)(T * D * N * H) * ws, *dh = state, *dc = state + (size_t)(D * N * H) * ws;
    OT_TRY(read_input(ctx, gi->hall, &c, H, false, wt, hall));
    if (gi->call >= 0) OT_TRY(read_input(ctx, gi->call, &c, H, false, wt, call));
    if (gi->gates >= 0) OT_TRY(read_input(ctx, gi->gates, &c, GH, false, wt, gates));
    OT_TRY(read_input(ctx, gi->dy, &c, H, false, wt, dy));
    OT_TRY(read_input(ctx, gi->dyh, &c, H, true, wt, dh));
    OT_TRY(read_input(ctx, gi->dyc, &c, H, true, wt, dc));
    if (wt == OTTER_DTYPE_FLOAT)
        OT_TRY(bptt_run_f32(ctx, &c, &in, (const double(*)[2])clipped, (const float *)hall, (const float *)call,
                            (const float *)gates, (const float *)dy, (float *)dh, (float *)dc, (float *)grads));
    else
        OT_TRY(bptt_run_f64(ctx, &c, &in, (const double(*)[2])clipped, (const double *)hall, (const double *)call,
                            (const double *)gates, (const double *)dy, (double *)dh, (double *)dc, (double *)grads));

    /* dX in X's layout */
    const char *dx = grads, *dw = dx + (size_t)(TN * I) * ws, *dr = dw + (size_t)(D * GH * I) * ws;
    const char *db = dr + (size_t)(D * GH * H) * ws, *dp = db + (size_t)(D * 2 * GH) * ws;
    if (wanted(ctx, 0)) {
        const otter_tensor *X = ot_ctx_input(ctx, 0);
        otter_tensor *dX = ot_ctx_output(ctx, 0, X->dtype, 3, X->dims);
        if (!dX) return ctx->output_status;
        const size_t es = otter_dtype_size(dX->dtype);
        for (int64_t t = 0; t < T; t++)
            for (int64_t b = 0; b < N; b++)
                ot_convert((char *)dX->data + (size_t)((c.layout ? b * T + t : t * N + b) * I) * es, dX->dtype,
                           dx + (size_t)((t * N + b) * I) * ws, wt, I);
    }
    OT_TRY(write_plain(ctx, 1, 3, (int64_t[]){D, GH, I}, wt, dw));
    OT_TRY(write_plain(ctx, 2, 3, (int64_t[]){D, GH, H}, wt, dr));
    OT_TRY(write_plain(ctx, 3, 2, (int64_t[]){D, 2 * GH}, wt, db));
    if (wanted(ctx, 4)) OT_TRY(ot_rnn_write_output(ctx, 4, &c, H, true, wt, dh));
    if (cell == OT_CELL_LSTM) {
        if (wanted(ctx, 5)) OT_TRY(ot_rnn_write_output(ctx, 5, &c, H, true, wt, dc));
        OT_TRY(write_plain(ctx, 6, 2, (int64_t[]){D, 3 * H}, wt, dp));
    }
    return OTTER_OK;
}

otter_status ot_kernel_lstm_grad(ot_kernel_ctx *ctx) { return rnn_grad(ctx, OT_CELL_LSTM); }
otter_status ot_kernel_gru_grad(ot_kernel_ctx *ctx) { return rnn_grad(ctx, OT_CELL_GRU); }
otter_status ot_kernel_rnn_grad(ot_kernel_ctx *ctx) { return rnn_grad(ctx, OT_CELL_RNN); }
