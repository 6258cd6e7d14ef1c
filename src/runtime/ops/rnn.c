/* Recurrent operators: RNN, GRU and LSTM (opset 7 and 14: layout attribute), and ONNX Runtime's
 * LSTMTraining / GRUTraining, the same forward pass recording what the gradient kernels need.
 *
 * One driver for the three cells. Inputs are converted to double working buffers laid out
 * [seq, batch, ...] whatever the layout, so the cells see one shape:
 *   XW[t, b, G*H] = X[t, b] * W_d^T + Wb (+ Rb where it may be folded in), one gemm per direction
 *   per step: G[b, :] = XW[t_b, b, :] + H[b] * R_d^T, then the cell's gate arithmetic.
 * With sequence_lens each batch row runs its own length: step s reads time s (forward) or
 * len_b - 1 - s (reverse); rows past their length keep their state and write zeros to Y.
 * Gate orders follow ONNX: GRU z, r, h; LSTM i, o, f, c; peepholes P = [Pi, Po, Pf]. */
#include <ctype.h>
#include <math.h>

#include "runtime/ops/broadcast.h"
#include "runtime/ops/gemm.h"
#include "runtime/ops/rnn_internal.h"
#include "runtime/ops/vec_math.h"

/* ---- activations ------------------------------------------------------------------------ */

static const struct {
    const char *name;
    ot_rnn_act_kind kind;
    bool has_alpha, has_beta;
    double alpha, beta; /* defaults */
} ACTS[] = {
    {"relu", OT_ACT_RELU, false, false, 0, 0},
    {"tanh", OT_ACT_TANH, false, false, 0, 0},
    {"sigmoid", OT_ACT_SIGMOID, false, false, 0, 0},
    {"affine", OT_ACT_AFFINE, true, true, 1.0, 0.0},
    {"leakyrelu", OT_ACT_LEAKYRELU, true, false, 0.01, 0},
    {"thresholdedrelu", OT_ACT_THRESHOLDEDRELU, true, false, 1.0, 0},
    {"scaledtanh", OT_ACT_SCALEDTANH, true, true, 1.0, 1.0},
    {"hardsigmoid", OT_ACT_HARDSIGMOID, true, true, 0.2, 0.5},
    {"elu", OT_ACT_ELU, true, false, 1.0, 0},
    {"softsign", OT_ACT_SOFTSIGN, false, false, 0, 0},
    {"softplus", OT_ACT_SOFTPLUS, false, false, 0, 0},
};

static bool name_is(const otter_bytes *s, const char *lower) {
    size_t n = strlen(lower);
    if (s->len != n || !s->data) return false;
    for (size_t i = 0; i < n; i++)
        if (tolower((unsigned char)s->data[i]) != lower[i]) return false;
    return true;
}

double ot_rnn_act_apply(const ot_rnn_act *a, double x) {
    switch (a->kind) {
    case OT_ACT_RELU:
        return x > 0 ? x : 0;
    case OT_ACT_TANH:
        return tanh(x);
    case OT_ACT_SIGMOID:
        return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
    case OT_ACT_AFFINE:
        return a->alpha * x + a->beta;
    case OT_ACT_LEAKYRELU:
        return x >= 0 ? x : a->alpha * x;
    case OT_ACT_THRESHOLDEDRELU:
        return x > a->alpha ? x : 0;
    case OT_ACT_SCALEDTANH:
        return a->alpha * tanh(a->beta * x);
    case OT_ACT_HARDSIGMOID: {
        double y = a->alpha * x + a->beta;
        return y < 0 ? 0 : y > 1 ? 1 : y;
    }
    case OT_ACT_ELU:
        return x >= 0 ? x : a->alpha * (exp(x) - 1);
    case OT_ACT_SOFTSIGN:
        return x / (1 + fabs(x));
    case OT_ACT_SOFTPLUS:
        return x > 30 ? x : log1p(exp(x));
    }
    return x;
}

double ot_rnn_act_deriv(const ot_rnn_act *a, double y) {
    switch (a->kind) {
    case OT_ACT_RELU:
        return y > 0 ? 1 : 0;
    case OT_ACT_TANH:
        return 1 - y * y;
    case OT_ACT_SIGMOID:
        return y * (1 - y);
    case OT_ACT_AFFINE:
        return a->alpha;
    case OT_ACT_LEAKYRELU: /* y has x's sign for a positive alpha */
        return y >= 0 ? 1 : a->alpha;
    case OT_ACT_THRESHOLDEDRELU:
        return y != 0 ? 1 : 0;
    case OT_ACT_SCALEDTANH: {
        double t = a->alpha != 0 ? y / a->alpha : 0;
        return a->alpha * a->beta * (1 - t * t);
    }
    case OT_ACT_HARDSIGMOID:
        return y > 0 && y < 1 ? a->alpha : 0;
    case OT_ACT_ELU:
        return y >= 0 ? 1 : y + a->alpha;
    case OT_ACT_SOFTSIGN:
        return (1 - fabs(y)) * (1 - fabs(y));
    case OT_ACT_SOFTPLUS: /* sigmoid(x) = 1 - exp(-softplus(x)) */
        return -expm1(-y);
    }
    return 1;
}

/* ---- configuration and inputs ------------------------------------------------------------ */

static otter_status parse_activations(const ot_kernel_ctx *ctx, ot_rnn_cfg *c) {
    static const ot_rnn_act_kind defaults[3][3] = {
        {OT_ACT_TANH}, {OT_ACT_SIGMOID, OT_ACT_TANH}, {OT_ACT_SIGMOID, OT_ACT_TANH, OT_ACT_TANH}};
    const otter_attr *names = otter_node_attr(ctx->node, "activations");
    const otter_attr *alphas = otter_node_attr(ctx->node, "activation_alpha");
    const otter_attr *betas = otter_node_attr(ctx->node, "activation_beta");
    size_t n_names = names ? names->n_strings : 0, ia = 0, ib = 0;
    int need = c->n_act * (int)c->D;
    if (n_names && (int)n_names != need && (int)n_names != c->n_act)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'activations' has %zu names, expected %d", n_names,
                            need);
    for (int k = 0; k < need; k++) {
        ot_rnn_act *a = &c->acts[k];
        if (!n_names) {
            a->kind = defaults[c->cell][k % c->n_act];
            a->alpha = a->beta = 0;
            continue;
        }
        const otter_bytes *s = &names->strings[(size_t)k % n_names];
        size_t j = 0;
        while (j < sizeof ACTS / sizeof ACTS[0] && !name_is(s, ACTS[j].name)) j++;
        if (j == sizeof ACTS / sizeof ACTS[0])
            return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "activation '%s' is not supported", s->data ? s->data : "");
        a->kind = ACTS[j].kind;
        a->alpha = ACTS[j].alpha;
        a->beta = ACTS[j].beta;
        /* alpha / beta values are consumed in the order of the activations that take them */
        if (ACTS[j].has_alpha && alphas && ia < alphas->n_floats) a->alpha = alphas->floats[ia++];
        if (ACTS[j].has_beta && betas && ib < betas->n_floats) a->beta = betas->floats[ib++];
    }
    return OTTER_OK;
}

static otter_status check_shape(const ot_kernel_ctx *ctx, size_t i, const otter_tensor *t, int rank,
                                const int64_t *dims) {
    bool ok = t->rank == rank;
    for (int k = 0; ok && k < rank; k++) ok = t->dims[k] == dims[k];
    if (ok) return OTTER_OK;
    char got[128], want[128];
    return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' has shape %s, expected %s", i,
                        ot_ctx_input_name(ctx, i), ot_shape_str(got, sizeof got, t->rank, t->dims),
                        ot_shape_str(want, sizeof want, rank, dims));
}

otter_status ot_rnn_config(const ot_kernel_ctx *ctx, ot_rnn_cell cell, ot_rnn_cfg *c) {
    *c = (ot_rnn_cfg){.cell = cell};
    c->G = cell == OT_CELL_RNN ? 1 : cell == OT_CELL_GRU ? 3 : 4;
    c->n_act = cell == OT_CELL_RNN ? 1 : cell == OT_CELL_GRU ? 2 : 3;
    const otter_tensor *X = ot_ctx_input(ctx, 0), *W = ot_ctx_input(ctx, 1), *R = ot_ctx_input(ctx, 2);
    const otter_tensor *B = ot_ctx_input(ctx, 3), *SL = ot_ctx_input(ctx, 4), *H0 = ot_ctx_input(ctx, 5);
    const otter_tensor *C0 = cell == OT_CELL_LSTM ? ot_ctx_input(ctx, 6) : NULL;
    const otter_tensor *P = cell == OT_CELL_LSTM ? ot_ctx_input(ctx, 7) : NULL;
    if (!X || !W || !R) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "inputs X, W and R are required");
    if (X->dtype != OTTER_DTYPE_FLOAT && X->dtype != OTTER_DTYPE_DOUBLE && X->dtype != OTTER_DTYPE_FLOAT16)
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "input 0 '%s' has type %s, which %s does not support",
                            ot_ctx_input_name(ctx, 0), otter_dtype_name(X->dtype), ctx->node->op_type);
    static const size_t same_index[] = {1, 2, 3, 5, 6, 7};
    const otter_tensor *same[] = {W, R, B, H0, C0, P};
    for (size_t k = 0; k < sizeof same / sizeof same[0]; k++)
        if (same[k] && same[k]->dtype != X->dtype)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %s has type %s, X has %s",
                                ot_ctx_input_name(ctx, same_index[k]), otter_dtype_name(same[k]->dtype),
                                otter_dtype_name(X->dtype));
    if (X->rank != 3 || W->rank != 3 || R->rank != 3)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "X, W and R must have rank 3 (got %d, %d, %d)", X->rank, W->rank,
                            R->rank);
    int64_t layout;
    OT_TRY(ot_ctx_attr_int(ctx, "layout", &layout));
    c->layout = (int)layout;
    if (c->layout != 0 && c->layout != 1)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'layout' is %d, expected 0 or 1", c->layout);
    const char *dir;
    OT_TRY(ot_ctx_attr_string(ctx, "direction", &dir));
    if (ot_streq(dir, "forward") || ot_streq(dir, "reverse")) {
        c->D = 1;
        c->reverse_only = dir[0] == 'r';
    } else if (ot_streq(dir, "bidirectional")) {
        c->D = 2;
    } else {
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'direction' is '%s'", dir);
    }
    c->T = X->dims[c->layout ? 1 : 0];
    c->N = X->dims[c->layout ? 0 : 1];
    c->I = X->dims[2];
    c->H = ot_ctx_attr_int_or(ctx, "hidden_size", W->dims[1] / c->G); /* no schema default: W's rows per gate */
    if (c->H <= 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "hidden_size is %lld", (long long)c->H);
    const int64_t GH = c->G * c->H;
    OT_TRY(check_shape(ctx, 1, W, 3, (int64_t[]){c->D, GH, c->I}));
    OT_TRY(check_shape(ctx, 2, R, 3, (int64_t[]){c->D, GH, c->H}));
    if (B) OT_TRY(check_shape(ctx, 3, B, 2, (int64_t[]){c->D, 2 * GH}));
    int64_t sdims[3] = {c->layout ? c->N : c->D, c->layout ? c->D : c->N, c->H};
    if (H0) OT_TRY(check_shape(ctx, 5, H0, 3, sdims));
    if (C0) OT_TRY(check_shape(ctx, 6, C0, 3, sdims));
    if (P) OT_TRY(check_shape(ctx, 7, P, 2, (int64_t[]){c->D, 3 * c->H}));
    if (SL &&
        (SL->rank != 1 || SL->dims[0] != c->N || (SL->dtype != OTTER_DTYPE_INT32 && SL->dtype != OTTER_DTYPE_INT64)))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 4 '%s' must be int32 of shape [%lld]",
                            ot_ctx_input_name(ctx, 4), (long long)c->N);
    const otter_attr *clip = otter_node_attr(ctx->node, "clip");
    if (clip) {
        c->has_clip = true;
        c->clip = clip->f;
    }
    int64_t linear_before_reset = 0, input_forget = 0; /* GRU's and LSTM's own */
    if (cell == OT_CELL_GRU) OT_TRY(ot_ctx_attr_int(ctx, "linear_before_reset", &linear_before_reset));
    if (cell == OT_CELL_LSTM) OT_TRY(ot_ctx_attr_int(ctx, "input_forget", &input_forget));
    c->linear_before_reset = linear_before_reset != 0;
    c->input_forget = input_forget != 0;
    return parse_activations(ctx, c);
}

void ot_rnn_read_state(const otter_tensor *t, const ot_rnn_cfg *c, double *dst) {
    for (int64_t d = 0; d < c->D; d++)
        for (int64_t b = 0; b < c->N; b++)
            for (int64_t h = 0; h < c->H; h++) {
                int64_t src = c->layout ? (b * c->D + d) * c->H + h : (d * c->N + b) * c->H + h;
                dst[(d * c->N + b) * c->H + h] = ot_get_f64(t->data, t->dtype, src);
            }
}

/* Element (t, d, b, k) of an all-steps tensor with K values per row, laid out like Y. */
static inline int64_t seq_index(const ot_rnn_cfg *c, int64_t K, int64_t t, int64_t d, int64_t b, int64_t k) {
    return (c->layout ? (b * c->T + t) * c->D + d : (t * c->D + d) * c->N + b) * K + k;
}

void ot_rnn_read_seq(const otter_tensor *t, const ot_rnn_cfg *c, int64_t K, double *dst) {
    for (int64_t s = 0; s < c->T; s++)
        for (int64_t d = 0; d < c->D; d++)
            for (int64_t b = 0; b < c->N; b++)
                for (int64_t k = 0; k < K; k++)
                    dst[((s * c->D + d) * c->N + b) * K + k] =
                        ot_get_f64(t->data, t->dtype, seq_index(c, K, s, d, b, k));
}

otter_status ot_rnn_write_output(ot_kernel_ctx *ctx, size_t index, const ot_rnn_cfg *c, int64_t K, bool state,
                                 const double *src) {
    const otter_tensor *X = ot_ctx_input(ctx, 0);
    int64_t dims[4] = {c->T, c->D, c->N, K};
    if (c->layout) dims[0] = c->N, dims[1] = c->T, dims[2] = c->D;
    if (state) {
        dims[0] = c->layout ? c->N : c->D;
        dims[1] = c->layout ? c->D : c->N;
        dims[2] = K;
    }
    otter_tensor *Y = ot_ctx_output(ctx, index, X->dtype, state ? 3 : 4, dims);
    if (!Y) return ctx->output_status;
    for (int64_t t = 0; t < (state ? 1 : c->T); t++)
        for (int64_t d = 0; d < c->D; d++)
            for (int64_t b = 0; b < c->N; b++)
                for (int64_t k = 0; k < K; k++) {
                    int64_t dst = state ? (c->layout ? (b * c->D + d) * K + k : (d * c->N + b) * K + k)
                                        : seq_index(c, K, t, d, b, k);
                    ot_set_f64(Y->data, Y->dtype, dst, src[((t * c->D + d) * c->N + b) * K + k]);
                }
    return OTTER_OK;
}

otter_status ot_rnn_load(ot_kernel_ctx *ctx, const ot_rnn_cfg *c, ot_rnn_inputs *in) {
    const otter_tensor *X = ot_ctx_input(ctx, 0), *W = ot_ctx_input(ctx, 1), *R = ot_ctx_input(ctx, 2);
    const otter_tensor *B = ot_ctx_input(ctx, 3), *SL = ot_ctx_input(ctx, 4), *H0 = ot_ctx_input(ctx, 5);
    const otter_tensor *C0 = c->cell == OT_CELL_LSTM ? ot_ctx_input(ctx, 6) : NULL;
    const otter_tensor *P = c->cell == OT_CELL_LSTM ? ot_ctx_input(ctx, 7) : NULL;
    const int64_t T = c->T, N = c->N, I = c->I, H = c->H, D = c->D, GH = c->G * H;
    size_t dsz = sizeof(double);
    in->lens = ot_ctx_scratch(ctx, (size_t)(N > 0 ? N : 1) * sizeof *in->lens);
    in->x = ot_ctx_scratch(ctx, (size_t)(T * N * I + 1) * dsz);
    in->w = ot_ctx_scratch(ctx, (size_t)(D * GH * (I + H) + 1) * dsz);
    in->bias = ot_ctx_scratch(ctx, (size_t)(D * 2 * GH + D * 3 * H + 1) * dsz);
    in->h0 = ot_ctx_scratch(ctx, (size_t)(2 * D * N * H + 1) * dsz);
    if (!in->lens || !in->x || !in->w || !in->bias || !in->h0) return OTTER_ERR_NOMEM;
    in->r = in->w + D * GH * I;
    in->peep = in->bias + D * 2 * GH;
    in->c0 = in->h0 + D * N * H;
    for (int64_t b = 0; b < N; b++) {
        in->lens[b] = SL ? ot_get_i64(SL->data, SL->dtype, b) : T;
        if (in->lens[b] < 0 || in->lens[b] > T)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                                "input 4 '%s' holds length %lld for batch %lld, sequence is %lld",
                                ot_ctx_input_name(ctx, 4), (long long)in->lens[b], (long long)b, (long long)T);
    }
    for (int64_t t = 0; t < T; t++)
        for (int64_t b = 0; b < N; b++)
            for (int64_t i = 0; i < I; i++) {
                int64_t src = c->layout ? (b * T + t) * I + i : (t * N + b) * I + i;
                in->x[(t * N + b) * I + i] = ot_get_f64(X->data, X->dtype, src);
            }
    ot_convert(in->w, OTTER_DTYPE_DOUBLE, W->data, W->dtype, D * GH * I);
    ot_convert(in->r, OTTER_DTYPE_DOUBLE, R->data, R->dtype, D * GH * H);
    if (B)
        ot_convert(in->bias, OTTER_DTYPE_DOUBLE, B->data, B->dtype, D * 2 * GH);
    else
        in->bias = NULL;
    if (P)
        ot_convert(in->peep, OTTER_DTYPE_DOUBLE, P->data, P->dtype, D * 3 * H);
    else
        in->peep = NULL;
    if (H0)
        ot_rnn_read_state(H0, c, in->h0);
    else
        memset(in->h0, 0, (size_t)(D * N * H) * dsz);
    if (C0)
        ot_rnn_read_state(C0, c, in->c0);
    else
        memset(in->c0, 0, (size_t)(D * N * H) * dsz);
    return OTTER_OK;
}

/* ---- the forward pass --------------------------------------------------------------------- */

static inline double clipv(const ot_rnn_cfg *c, double x) {
    if (!c->has_clip) return x;
    return x < -c->clip ? -c->clip : x > c->clip ? c->clip : x;
}

/* Working buffers for one direction. */
typedef struct rnn_work {
    double *xw;   /* [T, N, G*H] */
    double *gate; /* [N, G*H] */
    double *hr;   /* [N, H] (GRU: r * H_prev) */
    double *hrh;  /* [N, H] (GRU: (r * H_prev) R_h^T, or H_prev R_h^T) */
    double *pre;  /* [H]: a row before its activation (GRU's candidate, LSTM's cell) */
    float *act;   /* [2 H]: act_row's float copy */
} rnn_work;

/* x[0, n) = a(x[0, n)). Sigmoid and Tanh, every cell's default gates, run vec_math's vectorized float kernels
 * (float accuracy, as ONNX Runtime's and PyTorch's float RNNs have): libm's double exp per element was most of the
 * time of a GRU or LSTM step. The other activations stay in double, and so does every activation under `clip`:
 * the gradient kernels (rnn_train.c) spot a clipped gate by its recorded value being exactly act(+-clip) in double.
 * buf holds n floats. */
static void act_row(const ot_rnn_cfg *c, const ot_rnn_act *a, double *x, int64_t n, float *buf) {
    if (!c->has_clip && (a->kind == OT_ACT_SIGMOID || a->kind == OT_ACT_TANH)) {
        for (int64_t k = 0; k < n; k++) buf[k] = (float)x[k];
        ot_vec_activation(a->kind == OT_ACT_SIGMOID ? OT_VEC_SIGMOID : OT_VEC_TANH, 0, buf, NULL, buf, n);
        for (int64_t k = 0; k < n; k++) x[k] = buf[k];
        return;
    }
    for (int64_t k = 0; k < n; k++) x[k] = ot_rnn_act_apply(a, x[k]);
}

/* What the training forward pass records, [T][D][N][K] each (NULL: nothing). */
typedef struct rnn_record {
    double *gates; /* activated gates: LSTM i, o, f, c; GRU z, r, h */
    double *cells; /* LSTM cell states */
} rnn_record;

static otter_status run_direction(const ot_kernel_ctx *ctx, const ot_rnn_cfg *c, int64_t d, const ot_rnn_inputs *in,
                                  double *h_state, double *c_state, double *y, rnn_work *wk, const rnn_record *rec) {
    const int64_t T = c->T, N = c->N, I = c->I, H = c->H, GH = c->G * H;
    const double *x = in->x, *w = in->w + d * GH * I, *r = in->r + d * GH * H;
    const double *bias = in->bias ? in->bias + d * 2 * GH : NULL, *peep = in->peep ? in->peep + d * 3 * H : NULL;
    const int64_t *lens = in->lens;
    const ot_rnn_act *f = &c->acts[d * c->n_act], *g = c->n_act > 1 ? f + 1 : f, *hh = c->n_act > 2 ? f + 2 : f;
    const double *wb = bias, *rb = bias ? bias + GH : NULL;
    /* XW = X W^T + Wb + Rb (GRU's Rbh stays separate when linear_before_reset) */
    if (T * N > 0) OT_TRY(ot_dgemm(ctx, false, true, T * N, GH, I, 1.0, x, I, w, I, 0.0, wk->xw, GH));
    if (bias)
        for (int64_t tb = 0; tb < T * N; tb++)
            for (int64_t k = 0; k < GH; k++) {
                double add = wb[k];
                if (!(c->cell == OT_CELL_GRU && c->linear_before_reset && k >= 2 * H)) add += rb[k];
                wk->xw[tb * GH + k] += add;
            }
    for (int64_t s = 0; s < T; s++) {
        /* recurrent part over every row; rows that are done are skipped below */
        int64_t nrec = c->cell == OT_CELL_GRU && !c->linear_before_reset ? 2 * H : GH;
        OT_TRY(ot_dgemm(ctx, false, true, N, nrec, H, 1.0, h_state, H, r, H, 0.0, wk->gate, GH));
        if (c->cell == OT_CELL_GRU) {
            memset(wk->hr, 0, (size_t)(N * H) * sizeof *wk->hr);
            for (int64_t b = 0; b < N; b++) {
                if (s >= lens[b]) continue;
                int64_t t = ot_rnn_time(c, d, lens, b, s);
                double *gt = wk->gate + b * GH;
                const double *xt = wk->xw + (t * N + b) * GH;
                for (int64_t k = 0; k < 2 * H; k++) gt[k] = clipv(c, gt[k] + xt[k]);
                act_row(c, f, gt, 2 * H, wk->act);
                for (int64_t k = 0; k < H; k++) wk->hr[b * H + k] = gt[H + k] * h_state[b * H + k];
            }
            if (!c->linear_before_reset)
                OT_TRY(ot_dgemm(ctx, false, true, N, H, H, 1.0, wk->hr, H, r + 2 * H * H, H, 0.0, wk->hrh, H));
        } else {
            for (int64_t b = 0; b < N; b++) {
                if (s >= lens[b]) continue;
                int64_t t = ot_rnn_time(c, d, lens, b, s);
                const double *xt = wk->xw + (t * N + b) * GH;
                for (int64_t k = 0; k < GH; k++) wk->gate[b * GH + k] += xt[k];
            }
        }
        for (int64_t b = 0; b < N; b++) {
            if (s >= lens[b]) continue;
            int64_t t = ot_rnn_time(c, d, lens, b, s);
            double *gt = wk->gate + b * GH, *hs = h_state + b * H, *pre = wk->pre;
            double *rg = rec && rec->gates ? rec->gates + ((t * c->D + d) * N + b) * GH : NULL;
            if (c->cell == OT_CELL_RNN) {
                for (int64_t k = 0; k < H; k++) hs[k] = clipv(c, gt[k]);
                act_row(c, f, hs, H, wk->act);
            } else if (c->cell == OT_CELL_GRU) {
                const double *xt = wk->xw + (t * N + b) * GH + 2 * H;
                for (int64_t k = 0; k < H; k++)
                    pre[k] =
                        clipv(c, c->linear_before_reset ? xt[k] + gt[H + k] * (gt[2 * H + k] + (rb ? rb[2 * H + k] : 0))
                                                        : xt[k] + wk->hrh[b * H + k]);
                act_row(c, g, pre, H, wk->act);
                for (int64_t k = 0; k < H; k++) {
                    double ht = pre[k], z = gt[k];
                    hs[k] = (1 - z) * ht + z * hs[k];
                    if (rg) rg[k] = z, rg[H + k] = gt[H + k], rg[2 * H + k] = ht;
                }
            } else {
                /* gates in place in gt (i, o, f, c), a phase per activation so each runs over a whole row */
                double *cs = c_state + b * H, *gi = gt, *go = gt + H, *gf = gt + 2 * H, *gc = gt + 3 * H;
                const double *pi = peep, *po = peep ? peep + H : NULL, *pf = peep ? peep + 2 * H : NULL;
                for (int64_t k = 0; k < H; k++) {
                    gi[k] = clipv(c, gi[k] + (pi ? pi[k] * cs[k] : 0));
                    gf[k] = clipv(c, gf[k] + (pf ? pf[k] * cs[k] : 0));
                    gc[k] = clipv(c, gc[k]);
                }
                act_row(c, f, gi, H, wk->act);
                if (c->input_forget)
                    for (int64_t k = 0; k < H; k++) gf[k] = 1 - gi[k];
                else
                    act_row(c, f, gf, H, wk->act);
                act_row(c, g, gc, H, wk->act);
                for (int64_t k = 0; k < H; k++) {
                    cs[k] = gf[k] * cs[k] + gi[k] * gc[k];
                    go[k] = clipv(c, go[k] + (po ? po[k] * cs[k] : 0));
                    pre[k] = cs[k];
                }
                act_row(c, f, go, H, wk->act);
                act_row(c, hh, pre, H, wk->act);
                for (int64_t k = 0; k < H; k++) hs[k] = go[k] * pre[k];
                if (rg) memcpy(rg, gt, (size_t)GH * sizeof *rg);
                if (rec && rec->cells) memcpy(rec->cells + ((t * c->D + d) * N + b) * H, cs, (size_t)H * sizeof *cs);
            }
            if (y) memcpy(y + ((t * c->D + d) * N + b) * H, hs, (size_t)H * sizeof *hs);
        }
    }
    return OTTER_OK;
}

otter_status ot_rnn_forward(ot_kernel_ctx *ctx, ot_rnn_cell cell, bool record) {
    ot_rnn_cfg c;
    OT_TRY(ot_rnn_config(ctx, cell, &c));
    ot_rnn_inputs in;
    OT_TRY(ot_rnn_load(ctx, &c, &in));
    const int64_t T = c.T, N = c.N, H = c.H, D = c.D, GH = c.G * H;
    size_t dsz = sizeof(double);
    double *hs = ot_ctx_scratch(ctx, (size_t)(2 * D * N * H + 1) * dsz), *cs = hs ? hs + D * N * H : NULL;
    double *y = ot_ctx_scratch(ctx, (size_t)(T * D * N * H + 1) * dsz);
    rnn_work wk;
    wk.xw = ot_ctx_scratch(ctx, (size_t)(T * N * GH + 1) * dsz);
    wk.gate = ot_ctx_scratch(ctx, (size_t)(N * GH + 2 * N * H + H + 1) * dsz);
    wk.act = ot_ctx_scratch(ctx, (size_t)(2 * H + 1) * sizeof(float));
    rnn_record rec = {NULL, NULL};
    if (record) {
        /* rows past their sequence length record zeros, as Y holds */
        rec.gates = ot_ctx_scratch(ctx, (size_t)(T * D * N * GH + 1) * dsz);
        if (!rec.gates) return OTTER_ERR_NOMEM;
        memset(rec.gates, 0, (size_t)(T * D * N * GH) * dsz);
        if (cell == OT_CELL_LSTM) {
            rec.cells = ot_ctx_scratch(ctx, (size_t)(T * D * N * H + 1) * dsz);
            if (!rec.cells) return OTTER_ERR_NOMEM;
            memset(rec.cells, 0, (size_t)(T * D * N * H) * dsz);
        }
    }
    if (!hs || !y || !wk.xw || !wk.gate || !wk.act) return OTTER_ERR_NOMEM;
    wk.hr = wk.gate + N * GH;
    wk.hrh = wk.hr + N * H;
    wk.pre = wk.hrh + N * H;
    memcpy(hs, in.h0, (size_t)(2 * D * N * H) * dsz); /* h0 then c0 */
    memset(y, 0, (size_t)(T * D * N * H) * dsz);

    for (int64_t d = 0; d < D; d++)
        OT_TRY(run_direction(ctx, &c, d, &in, hs + d * N * H, cs + d * N * H, y, &wk, record ? &rec : NULL));

    if (ctx->n_outputs > 0) OT_TRY(ot_rnn_write_output(ctx, 0, &c, H, false, y));
    for (size_t o = 1; o < ctx->n_outputs && o < (cell == OT_CELL_LSTM ? 3u : 2u); o++)
        OT_TRY(ot_rnn_write_output(ctx, o, &c, H, true, o == 1 ? hs : cs));
    if (record && cell == OT_CELL_LSTM) {
        if (ctx->n_outputs > 3) OT_TRY(ot_rnn_write_output(ctx, 3, &c, H, false, rec.cells));
        if (ctx->n_outputs > 4) OT_TRY(ot_rnn_write_output(ctx, 4, &c, GH, false, rec.gates));
    } else if (record && ctx->n_outputs > 2) {
        OT_TRY(ot_rnn_write_output(ctx, 2, &c, GH, false, rec.gates));
    }
    return OTTER_OK;
}

otter_status ot_kernel_rnn(ot_kernel_ctx *ctx) { return ot_rnn_forward(ctx, OT_CELL_RNN, false); }
otter_status ot_kernel_gru(ot_kernel_ctx *ctx) { return ot_rnn_forward(ctx, OT_CELL_GRU, false); }
otter_status ot_kernel_lstm(ot_kernel_ctx *ctx) { return ot_rnn_forward(ctx, OT_CELL_LSTM, false); }
