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
 * the activation is flat (zero derivative too) or within rounding of the bound. */
#include "runtime/ops/broadcast.h"
#include "runtime/ops/gemm.h"
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

/* Input i (an all-steps tensor with K values per row, or a state) into dst, zeros when omitted. */
static otter_status read_input(const ot_kernel_ctx *ctx, int i, const ot_rnn_cfg *c, int64_t K, bool state,
                               double *dst) {
    const otter_tensor *t = i >= 0 ? ot_ctx_input(ctx, (size_t)i) : NULL;
    int64_t n = (state ? 1 : c->T) * c->D * c->N * K;
    if (!t) {
        memset(dst, 0, (size_t)n * sizeof *dst);
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
        ot_rnn_read_state(t, c, OTTER_DTYPE_DOUBLE, dst);
    else
        ot_rnn_read_seq(t, c, K, OTTER_DTYPE_DOUBLE, dst);
    return OTTER_OK;
}

static bool wanted(const ot_kernel_ctx *ctx, size_t i) {
    return i < ctx->n_outputs && ctx->node->outputs[i] && ctx->node->outputs[i][0];
}

static otter_status write_plain(ot_kernel_ctx *ctx, size_t i, int rank, const int64_t *dims, const double *src) {
    if (!wanted(ctx, i)) return OTTER_OK;
    otter_tensor *t = ot_ctx_output(ctx, i, ot_ctx_input(ctx, 0)->dtype, rank, dims);
    if (!t) return ctx->output_status;
    int64_t n = 1;
    for (int k = 0; k < rank; k++) n *= dims[k];
    ot_convert(t->data, t->dtype, src, OTTER_DTYPE_DOUBLE, n);
    return OTTER_OK;
}

/* Everything backpropagation reads and writes, double, [T][D][N][K] for all-steps tensors. */
typedef struct bptt {
    const ot_rnn_cfg *c;
    const ot_rnn_inputs *in;
    const double *hall, *call, *gates, *dy;
    double *dh, *dc;      /* [D, N, H]: the running state gradients, dY_h / dY_c at first */
    double *da_in;        /* [T, N, GH]: gradients of the input-side pre-activations (X W^T + Wb) */
    double *da_rec;       /* [T, N, GH]: of the recurrent side (H R^T + Rb); da_in except GRU's h block */
    double *hp;           /* [T, N, H]: the hidden state each step started from */
    double *rhp;          /* [T, N, H]: GRU: r * H_prev (or H_prev R_h^T with linear_before_reset) */
    double *step, *tmp;   /* [N, GH]: this step's dA; [N, H] (GRU: 2 of them): dH_prev's direct part */
    double *dx, *dw, *dr; /* [T, N, I], [D, GH, I], [D, GH, H] */
    double *db, *dp;      /* [D, 2 GH], [D, 3H] */
    double clipped[6][2]; /* per activation: act(-clip), act(clip) in the tensors' precision */
} bptt;

/* The derivative of a gate's activation a, which output y (recorded, so clipping shows). */
static double gate_deriv(const bptt *p, const ot_rnn_act *a, double y) {
    const double *cl = p->clipped[a - p->c->acts];
    if (p->c->has_clip && (y == cl[0] || y == cl[1])) return 0;
    return ot_rnn_act_deriv(a, y);
}

/* The state a step of row b started from: the previous step's output, or the initial state. */
static const double *prev_state(const bptt *p, const double *all, const double *init, int64_t d, int64_t b, int64_t s) {
    const ot_rnn_cfg *c = p->c;
    if (s == 0) return init + (d * c->N + b) * c->H;
    int64_t t = ot_rnn_time(c, d, p->in->lens, b, s - 1);
    return all + ((t * c->D + d) * c->N + b) * c->H;
}

/* One step of the LSTM cell for row b at time t: fills dA, updates dc and the peephole gradients. */
static void lstm_step(bptt *p, int64_t d, int64_t b, int64_t t, int64_t s, double *da) {
    const ot_rnn_cfg *c = p->c;
    const int64_t N = c->N, H = c->H, GH = c->G * H;
    const ot_rnn_act *fa = &c->acts[d * 3], *ga = fa + 1, *ha = fa + 2;
    const double *gt = p->gates + ((t * c->D + d) * N + b) * GH;
    const double *ct = p->call + ((t * c->D + d) * N + b) * H;
    const double *cp = prev_state(p, p->call, (const double *)p->in->c0, d, b, s);
    const double *peep = p->in->peep ? (const double *)p->in->peep + d * 3 * H : NULL;
    double *dp = p->dp + d * 3 * H, *dh = p->dh + (d * N + b) * H, *dc = p->dc + (d * N + b) * H;
    for (int64_t k = 0; k < H; k++) {
        double i = gt[k], o = gt[H + k], f = gt[2 * H + k], g = gt[3 * H + k];
        double hc = ot_rnn_act_apply(ha, ct[k]);
        double dcell = dc[k] + dh[k] * o * ot_rnn_act_deriv(ha, hc);
        double dao = dh[k] * hc * gate_deriv(p, fa, o);
        if (peep) {
            dcell += dao * peep[H + k]; /* o sees the new cell state */
            dp[H + k] += dao * ct[k];
        }
        double di = dcell * g, dg = dcell * i, df = dcell * cp[k], dprev = dcell * f, daf = 0;
        if (c->input_forget)
            di -= df; /* f = 1 - i */
        else
            daf = df * gate_deriv(p, fa, f);
        double dai = di * gate_deriv(p, fa, i);
        if (peep) {
            dprev += dai * peep[k] + daf * peep[2 * H + k];
            dp[k] += dai * cp[k];
            dp[2 * H + k] += daf * cp[k];
        }
        da[k] = dai;
        da[H + k] = dao;
        da[2 * H + k] = daf;
        da[3 * H + k] = dg * gate_deriv(p, ga, g);
        dc[k] = dprev;
    }
}

static otter_status backprop_direction(const ot_kernel_ctx *ctx, bptt *p, int64_t d) {
    const ot_rnn_cfg *c = p->c;
    const ot_rnn_inputs *in = p->in;
    const int64_t T = c->T, N = c->N, I = c->I, H = c->H, D = c->D, GH = c->G * H, TN = T * N;
    const int64_t *lens = in->lens;
    const double *w = (const double *)in->w + d * GH * I, *r = (const double *)in->r + d * GH * H;
    const double *rbh = in->bias && c->cell == OT_CELL_GRU ? (const double *)in->bias + d * 2 * GH + GH + 2 * H : NULL;
    const bool gru = c->cell == OT_CELL_GRU, lbr = gru && c->linear_before_reset;
    double *dh = p->dh + d * N * H;
    size_t dsz = sizeof(double);
    memset(p->da_in, 0, (size_t)(TN * GH) * dsz);
    if (p->da_rec != p->da_in) memset(p->da_rec, 0, (size_t)(TN * GH) * dsz);
    memset(p->hp, 0, (size_t)(TN * H) * dsz); /* rows past their length stay zero, in rhp too */
    memset(p->rhp, 0, (size_t)(TN * H) * dsz);
    for (int64_t b = 0; b < N; b++)
        for (int64_t s = 0; s < lens[b]; s++)
            memcpy(p->hp + (ot_rnn_time(c, d, lens, b, s) * N + b) * H,
                   prev_state(p, p->hall, (const double *)in->h0, d, b, s), (size_t)H * dsz);
    /* linear_before_reset: every step's H_prev R_h^T at once (the forward pass's, recomputed) */
    if (lbr && TN > 0) OT_TRY(ot_dgemm(ctx, false, true, TN, H, H, 1.0, p->hp, H, r + 2 * H * H, H, 0.0, p->rhp, H));
    const ot_rnn_act *fa = &c->acts[d * c->n_act], *ga = c->n_act > 1 ? fa + 1 : fa;
    for (int64_t s = T - 1; s >= 0; s--) {
        memset(p->step, 0, (size_t)(N * GH) * dsz);
        memset(p->tmp, 0, (size_t)(N * H) * dsz); /* the direct (non-GEMM) part of dH_prev */
        for (int64_t b = 0; b < N; b++) {
            if (s >= lens[b]) continue;
            int64_t t = ot_rnn_time(c, d, lens, b, s);
            const double *dyt = p->dy + ((t * D + d) * N + b) * H;
            double *dhb = dh + b * H, *da = p->step + b * GH;
            for (int64_t k = 0; k < H; k++) dhb[k] += dyt[k];
            if (c->cell == OT_CELL_RNN) {
                const double *ht = p->hall + ((t * D + d) * N + b) * H;
                for (int64_t k = 0; k < H; k++) da[k] = dhb[k] * gate_deriv(p, fa, ht[k]);
            } else if (gru) {
                const double *gt = p->gates + ((t * D + d) * N + b) * GH, *hp = p->hp + (t * N + b) * H;
                for (int64_t k = 0; k < H; k++) {
                    double z = gt[k], hh = gt[2 * H + k];
                    da[k] = dhb[k] * (hp[k] - hh) * gate_deriv(p, fa, z);
                    da[2 * H + k] = dhb[k] * (1 - z) * gate_deriv(p, ga, hh);
                    p->tmp[b * H + k] = dhb[k] * z;
                }
            } else {
                lstm_step(p, d, b, t, s, da);
            }
        }
        if (gru) {
            /* the reset gate: r multiplies H_prev R_h^T + Rbh (linear_before_reset) or H_prev */
            double *grh = p->tmp + N * H; /* [N, H]: dA_h R_h, without linear_before_reset */
            if (!lbr && N > 0)
                OT_TRY(ot_dgemm(ctx, false, false, N, H, H, 1.0, p->step + 2 * H, GH, r + 2 * H * H, H, 0.0, grh, H));
            for (int64_t b = 0; b < N; b++) {
                if (s >= lens[b]) continue;
                int64_t t = ot_rnn_time(c, d, lens, b, s);
                const double *gt = p->gates + ((t * D + d) * N + b) * GH, *hp = p->hp + (t * N + b) * H;
                double *da = p->step + b * GH, *rhp = p->rhp + (t * N + b) * H;
                double *rec_h = p->da_rec + (t * N + b) * GH + 2 * H;
                for (int64_t k = 0; k < H; k++) {
                    double rg = gt[H + k], dr;
                    if (lbr) {
                        dr = da[2 * H + k] * (rhp[k] + (rbh ? rbh[k] : 0));
                        rec_h[k] = da[2 * H + k] * rg;
                    } else {
                        dr = grh[b * H + k] * hp[k];
                        p->tmp[b * H + k] += grh[b * H + k] * rg;
                        rhp[k] = rg * hp[k];
                        rec_h[k] = da[2 * H + k];
                    }
                    da[H + k] = dr * gate_deriv(p, fa, rg);
                }
                memcpy(p->da_in + (t * N + b) * GH, da, (size_t)GH * dsz);
                memcpy(p->da_rec + (t * N + b) * GH, da, (size_t)(2 * H) * dsz);
                if (lbr) memcpy(da + 2 * H, rec_h, (size_t)H * dsz); /* the recurrent GEMM takes r * dA_h */
            }
        } else {
            for (int64_t b = 0; b < N; b++)
                if (s < lens[b])
                    memcpy(p->da_in + (ot_rnn_time(c, d, lens, b, s) * N + b) * GH, p->step + b * GH, (size_t)GH * dsz);
        }
        /* dH_prev = direct part + dA_rec R (GRU without linear_before_reset: the z, r blocks only) */
        int64_t kk = gru && !lbr ? 2 * H : GH;
        if (N > 0) OT_TRY(ot_dgemm(ctx, false, false, N, H, kk, 1.0, p->step, GH, r, H, 1.0, p->tmp, H));
        for (int64_t b = 0; b < N; b++)
            if (s < lens[b]) memcpy(dh + b * H, p->tmp + b * H, (size_t)H * dsz);
    }
    if (TN == 0) return OTTER_OK; /* the weights' gradients stay zero */
    /* the input side over all steps at once */
    OT_TRY(ot_dgemm(ctx, false, false, TN, I, GH, 1.0, p->da_in, GH, w, I, 1.0, p->dx, I));
    OT_TRY(
        ot_dgemm(ctx, true, false, GH, I, TN, 1.0, p->da_in, GH, (const double *)in->x, I, 0.0, p->dw + d * GH * I, I));
    double *dr = p->dr + d * GH * H;
    if (gru) {
        OT_TRY(ot_dgemm(ctx, true, false, 2 * H, H, TN, 1.0, p->da_rec, GH, p->hp, H, 0.0, dr, H));
        OT_TRY(ot_dgemm(ctx, true, false, H, H, TN, 1.0, p->da_rec + 2 * H, GH, lbr ? p->hp : p->rhp, H, 0.0,
                        dr + 2 * H * H, H));
    } else {
        OT_TRY(ot_dgemm(ctx, true, false, GH, H, TN, 1.0, p->da_rec, GH, p->hp, H, 0.0, dr, H));
    }
    double *db = p->db + d * 2 * GH;
    for (int64_t row = 0; row < TN; row++)
        for (int64_t k = 0; k < GH; k++) {
            db[k] += p->da_in[row * GH + k];
            db[GH + k] += p->da_rec[row * GH + k];
        }
    return OTTER_OK;
}

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
    ot_rnn_inputs in;
    OT_TRY(ot_rnn_load(ctx, &c, OTTER_DTYPE_DOUBLE, &in));
    const int64_t T = c.T, N = c.N, I = c.I, H = c.H, D = c.D, GH = c.G * H, TN = T * N;
    size_t dsz = sizeof(double);
    bptt p = {.c = &c, .in = &in};
    for (int k = 0; c.has_clip && k < c.n_act * (int)c.D; k++)
        for (int side = 0; side < 2; side++) { /* rounded as the recorded activations were */
            unsigned char v[sizeof(double)];
            ot_set_f64(v, ot_ctx_input(ctx, 0)->dtype, 0, ot_rnn_act_apply(&c.acts[k], side ? c.clip : -c.clip));
            p.clipped[k][side] = ot_get_f64(v, ot_ctx_input(ctx, 0)->dtype, 0);
        }
    double *seq = ot_ctx_scratch(ctx, (size_t)(T * D * N * (3 * H + GH) + 1) * dsz);
    double *state = ot_ctx_scratch(ctx, (size_t)(2 * D * N * H + 1) * dsz);
    double *work = ot_ctx_scratch(ctx, (size_t)(2 * TN * GH + 2 * TN * H + N * GH + 2 * N * H + 1) * dsz);
    size_t n_grads = (size_t)(TN * I + D * GH * (I + H + 2) + D * 3 * H);
    double *grads = ot_ctx_scratch(ctx, (n_grads + 1) * dsz);
    if (!seq || !state || !work || !grads) return OTTER_ERR_NOMEM;
    memset(grads, 0, n_grads * dsz);
    double *hall = seq, *call = hall + T * D * N * H, *dy = call + T * D * N * H, *gates = dy + T * D * N * H;
    p.dh = state;
    p.dc = state + D * N * H;
    OT_TRY(read_input(ctx, gi->hall, &c, H, false, hall));
    if (gi->call >= 0) OT_TRY(read_input(ctx, gi->call, &c, H, false, call));
    if (gi->gates >= 0) OT_TRY(read_input(ctx, gi->gates, &c, GH, false, gates));
    OT_TRY(read_input(ctx, gi->dy, &c, H, false, dy));
    OT_TRY(read_input(ctx, gi->dyh, &c, H, true, p.dh));
    OT_TRY(read_input(ctx, gi->dyc, &c, H, true, p.dc));
    p.hall = hall;
    p.call = call;
    p.gates = gates;
    p.dy = dy;
    p.da_in = work;
    p.da_rec = cell == OT_CELL_GRU ? work + TN * GH : work;
    p.hp = work + 2 * TN * GH;
    p.rhp = p.hp + TN * H;
    p.step = p.rhp + TN * H;
    p.tmp = p.step + N * GH; /* N * H, then N * H for GRU's dA_h R_h */
    p.dx = grads;
    p.dw = p.dx + TN * I;
    p.dr = p.dw + D * GH * I;
    p.db = p.dr + D * GH * H;
    p.dp = p.db + D * 2 * GH;
    for (int64_t d = 0; d < D; d++) OT_TRY(backprop_direction(ctx, &p, d));

    /* dX in X's layout */
    if (wanted(ctx, 0)) {
        const otter_tensor *X = ot_ctx_input(ctx, 0);
        otter_tensor *dX = ot_ctx_output(ctx, 0, X->dtype, 3, X->dims);
        if (!dX) return ctx->output_status;
        for (int64_t t = 0; t < T; t++)
            for (int64_t b = 0; b < N; b++)
                for (int64_t i = 0; i < I; i++)
                    ot_set_f64(dX->data, dX->dtype, c.layout ? (b * T + t) * I + i : (t * N + b) * I + i,
                               p.dx[(t * N + b) * I + i]);
    }
    OT_TRY(write_plain(ctx, 1, 3, (int64_t[]){D, GH, I}, p.dw));
    OT_TRY(write_plain(ctx, 2, 3, (int64_t[]){D, GH, H}, p.dr));
    OT_TRY(write_plain(ctx, 3, 2, (int64_t[]){D, 2 * GH}, p.db));
    if (wanted(ctx, 4)) OT_TRY(ot_rnn_write_output(ctx, 4, &c, H, true, OTTER_DTYPE_DOUBLE, p.dh));
    if (cell == OT_CELL_LSTM) {
        if (wanted(ctx, 5)) OT_TRY(ot_rnn_write_output(ctx, 5, &c, H, true, OTTER_DTYPE_DOUBLE, p.dc));
        OT_TRY(write_plain(ctx, 6, 2, (int64_t[]){D, 3 * H}, p.dp));
    }
    return OTTER_OK;
}

otter_status ot_kernel_lstm_grad(ot_kernel_ctx *ctx) { return rnn_grad(ctx, OT_CELL_LSTM); }
otter_status ot_kernel_gru_grad(ot_kernel_ctx *ctx) { return rnn_grad(ctx, OT_CELL_GRU); }
otter_status ot_kernel_rnn_grad(ot_kernel_ctx *ctx) { return rnn_grad(ctx, OT_CELL_RNN); }
