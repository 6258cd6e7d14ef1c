/* Recurrent operators: RNN, GRU and LSTM (opset 7 and 14: layout attribute).
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

#include "runtime/ops/kernels.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/gemm.h"

/* ---- activations ------------------------------------------------------------------------ */

typedef enum act_kind {
    ACT_RELU,
    ACT_TANH,
    ACT_SIGMOID,
    ACT_AFFINE,
    ACT_LEAKYRELU,
    ACT_THRESHOLDEDRELU,
    ACT_SCALEDTANH,
    ACT_HARDSIGMOID,
    ACT_ELU,
    ACT_SOFTSIGN,
    ACT_SOFTPLUS,
} act_kind;

typedef struct act_fn {
    act_kind kind;
    double alpha, beta;
} act_fn;

static const struct {
    const char *name;
    act_kind kind;
    bool has_alpha, has_beta;
    double alpha, beta; /* defaults */
} ACTS[] = {
    {"relu", ACT_RELU, false, false, 0, 0},
    {"tanh", ACT_TANH, false, false, 0, 0},
    {"sigmoid", ACT_SIGMOID, false, false, 0, 0},
    {"affine", ACT_AFFINE, true, true, 1.0, 0.0},
    {"leakyrelu", ACT_LEAKYRELU, true, false, 0.01, 0},
    {"thresholdedrelu", ACT_THRESHOLDEDRELU, true, false, 1.0, 0},
    {"scaledtanh", ACT_SCALEDTANH, true, true, 1.0, 1.0},
    {"hardsigmoid", ACT_HARDSIGMOID, true, true, 0.2, 0.5},
    {"elu", ACT_ELU, true, false, 1.0, 0},
    {"softsign", ACT_SOFTSIGN, false, false, 0, 0},
    {"softplus", ACT_SOFTPLUS, false, false, 0, 0},
};

static bool name_is(const otter_bytes *s, const char *lower) {
    size_t n = strlen(lower);
    if (s->len != n || !s->data) return false;
    for (size_t i = 0; i < n; i++)
        if (tolower((unsigned char)s->data[i]) != lower[i]) return false;
    return true;
}

static inline double act_apply(const act_fn *a, double x) {
    switch (a->kind) {
    case ACT_RELU:
        return x > 0 ? x : 0;
    case ACT_TANH:
        return tanh(x);
    case ACT_SIGMOID:
        return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
    case ACT_AFFINE:
        return a->alpha * x + a->beta;
    case ACT_LEAKYRELU:
        return x >= 0 ? x : a->alpha * x;
    case ACT_THRESHOLDEDRELU:
        return x > a->alpha ? x : 0;
    case ACT_SCALEDTANH:
        return a->alpha * tanh(a->beta * x);
    case ACT_HARDSIGMOID: {
        double y = a->alpha * x + a->beta;
        return y < 0 ? 0 : y > 1 ? 1 : y;
    }
    case ACT_ELU:
        return x >= 0 ? x : a->alpha * (exp(x) - 1);
    case ACT_SOFTSIGN:
        return x / (1 + fabs(x));
    case ACT_SOFTPLUS:
        return x > 30 ? x : log1p(exp(x));
    }
    return x;
}

/* ---- the driver --------------------------------------------------------------------------- */

typedef enum cell_kind { CELL_RNN, CELL_GRU, CELL_LSTM } cell_kind;

typedef struct rnn_cfg {
    cell_kind cell;
    int G;     /* gates: 1, 3, 4 */
    int n_act; /* activations per direction: 1, 2, 3 */
    int64_t T, N, I, H, D;
    int layout;
    bool reverse_only;
    bool has_clip;
    double clip;
    bool linear_before_reset; /* GRU */
    bool input_forget;        /* LSTM */
    act_fn acts[6];           /* [direction * n_act + k] */
} rnn_cfg;

static otter_status parse_activations(const ot_kernel_ctx *ctx, rnn_cfg *c) {
    static const act_kind defaults[3][3] = {{ACT_TANH}, {ACT_SIGMOID, ACT_TANH}, {ACT_SIGMOID, ACT_TANH, ACT_TANH}};
    const otter_attr *names = otter_node_attr(ctx->node, "activations");
    const otter_attr *alphas = otter_node_attr(ctx->node, "activation_alpha");
    const otter_attr *betas = otter_node_attr(ctx->node, "activation_beta");
    size_t n_names = names ? names->n_strings : 0, ia = 0, ib = 0;
    int need = c->n_act * (int)c->D;
    if (n_names && (int)n_names != need && (int)n_names != c->n_act)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'activations' has %zu names, expected %d", n_names,
                            need);
    for (int k = 0; k < need; k++) {
        act_fn *a = &c->acts[k];
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

/* Read a [D, N, H] state (layout 0) or [N, D, H] (layout 1) into dst [D][N][H]. */
static void read_state(const otter_tensor *t, const rnn_cfg *c, double *dst) {
    for (int64_t d = 0; d < c->D; d++)
        for (int64_t b = 0; b < c->N; b++)
            for (int64_t h = 0; h < c->H; h++) {
                int64_t src = c->layout ? (b * c->D + d) * c->H + h : (d * c->N + b) * c->H + h;
                dst[(d * c->N + b) * c->H + h] = ot_get_f64(t->data, t->dtype, src);
            }
}

static void write_state(otter_tensor *t, const rnn_cfg *c, const double *src) {
    for (int64_t d = 0; d < c->D; d++)
        for (int64_t b = 0; b < c->N; b++)
            for (int64_t h = 0; h < c->H; h++) {
                int64_t dst = c->layout ? (b * c->D + d) * c->H + h : (d * c->N + b) * c->H + h;
                ot_set_f64(t->data, t->dtype, dst, src[(d * c->N + b) * c->H + h]);
            }
}

static inline double clipv(const rnn_cfg *c, double x) {
    if (!c->has_clip) return x;
    return x < -c->clip ? -c->clip : x > c->clip ? c->clip : x;
}

/* Working buffers for one direction. */
typedef struct rnn_work {
    double *xw;   /* [T, N, G*H] */
    double *gate; /* [N, G*H] */
    double *hr;   /* [N, H] (GRU: r * H_prev) */
    double *hrh;  /* [N, H] (GRU: (r * H_prev) R_h^T, or H_prev R_h^T) */
} rnn_work;

static otter_status run_direction(const ot_kernel_ctx *ctx, const rnn_cfg *c, int64_t d, const double *x,
                                  const double *w, const double *r, const double *bias, const double *peep,
                                  const int64_t *lens, double *h_state, double *c_state, double *y, rnn_work *wk) {
    const int64_t T = c->T, N = c->N, I = c->I, H = c->H, GH = c->G * H;
    const bool rev = c->reverse_only || d == 1;
    const act_fn *f = &c->acts[d * c->n_act], *g = c->n_act > 1 ? f + 1 : f, *hh = c->n_act > 2 ? f + 2 : f;
    const double *wb = bias, *rb = bias ? bias + GH : NULL;
    /* XW = X W^T + Wb + Rb (GRU's Rbh stays separate when linear_before_reset) */
    if (T * N > 0) OT_TRY(ot_dgemm(ctx, false, true, T * N, GH, I, 1.0, x, I, w, I, 0.0, wk->xw, GH));
    if (bias)
        for (int64_t tb = 0; tb < T * N; tb++)
            for (int64_t k = 0; k < GH; k++) {
                double add = wb[k];
                if (!(c->cell == CELL_GRU && c->linear_before_reset && k >= 2 * H)) add += rb[k];
                wk->xw[tb * GH + k] += add;
            }
    for (int64_t s = 0; s < T; s++) {
        /* recurrent part over every row; rows that are done are skipped below */
        int64_t rec = c->cell == CELL_GRU && !c->linear_before_reset ? 2 * H : GH;
        OT_TRY(ot_dgemm(ctx, false, true, N, rec, H, 1.0, h_state, H, r, H, 0.0, wk->gate, GH));
        if (c->cell == CELL_GRU) {
            memset(wk->hr, 0, (size_t)(N * H) * sizeof *wk->hr);
            for (int64_t b = 0; b < N; b++) {
                if (s >= lens[b]) continue;
                int64_t t = rev ? lens[b] - 1 - s : s;
                double *gt = wk->gate + b * GH;
                const double *xt = wk->xw + (t * N + b) * GH;
                for (int64_t k = 0; k < 2 * H; k++) gt[k] = act_apply(f, clipv(c, gt[k] + xt[k]));
                for (int64_t k = 0; k < H; k++) wk->hr[b * H + k] = gt[H + k] * h_state[b * H + k];
            }
            if (!c->linear_before_reset)
                OT_TRY(ot_dgemm(ctx, false, true, N, H, H, 1.0, wk->hr, H, r + 2 * H * H, H, 0.0, wk->hrh, H));
        } else {
            for (int64_t b = 0; b < N; b++) {
                if (s >= lens[b]) continue;
                int64_t t = rev ? lens[b] - 1 - s : s;
                const double *xt = wk->xw + (t * N + b) * GH;
                for (int64_t k = 0; k < GH; k++) wk->gate[b * GH + k] += xt[k];
            }
        }
        for (int64_t b = 0; b < N; b++) {
            if (s >= lens[b]) continue;
            int64_t t = rev ? lens[b] - 1 - s : s;
            double *gt = wk->gate + b * GH, *hs = h_state + b * H;
            if (c->cell == CELL_RNN) {
                for (int64_t k = 0; k < H; k++) hs[k] = act_apply(f, clipv(c, gt[k]));
            } else if (c->cell == CELL_GRU) {
                const double *xt = wk->xw + (t * N + b) * GH + 2 * H;
                for (int64_t k = 0; k < H; k++) {
                    double pre;
                    if (c->linear_before_reset)
                        pre = xt[k] + gt[H + k] * (gt[2 * H + k] + (rb ? rb[2 * H + k] : 0));
                    else
                        pre = xt[k] + wk->hrh[b * H + k];
                    double ht = act_apply(g, clipv(c, pre)), z = gt[k];
                    hs[k] = (1 - z) * ht + z * hs[k];
                }
            } else {
                double *cs = c_state + b * H;
                const double *pi = peep, *po = peep ? peep + H : NULL, *pf = peep ? peep + 2 * H : NULL;
                for (int64_t k = 0; k < H; k++) {
                    double cp = cs[k];
                    double i = act_apply(f, clipv(c, gt[k] + (pi ? pi[k] * cp : 0)));
                    double fg = c->input_forget ? 1 - i : act_apply(f, clipv(c, gt[2 * H + k] + (pf ? pf[k] * cp : 0)));
                    double ct = act_apply(g, clipv(c, gt[3 * H + k]));
                    double cn = fg * cp + i * ct;
                    double o = act_apply(f, clipv(c, gt[H + k] + (po ? po[k] * cn : 0)));
                    cs[k] = cn;
                    hs[k] = o * act_apply(hh, cn);
                }
            }
            if (y) memcpy(y + ((t * c->D + d) * N + b) * H, hs, (size_t)H * sizeof *hs);
        }
    }
    return OTTER_OK;
}

static otter_status rnn_common(ot_kernel_ctx *ctx, cell_kind cell) {
    rnn_cfg c = {.cell = cell};
    c.G = cell == CELL_RNN ? 1 : cell == CELL_GRU ? 3 : 4;
    c.n_act = cell == CELL_RNN ? 1 : cell == CELL_GRU ? 2 : 3;
    const otter_tensor *X = ot_ctx_input(ctx, 0), *W = ot_ctx_input(ctx, 1), *R = ot_ctx_input(ctx, 2);
    const otter_tensor *B = ot_ctx_input(ctx, 3), *SL = ot_ctx_input(ctx, 4), *H0 = ot_ctx_input(ctx, 5);
    const otter_tensor *C0 = cell == CELL_LSTM ? ot_ctx_input(ctx, 6) : NULL;
    const otter_tensor *P = cell == CELL_LSTM ? ot_ctx_input(ctx, 7) : NULL;
    if (!X || !W || !R) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "inputs X, W and R are required");
    if (X->dtype != OTTER_DTYPE_FLOAT && X->dtype != OTTER_DTYPE_DOUBLE && X->dtype != OTTER_DTYPE_FLOAT16)
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "input 0 '%s' has type %s, which %s does not support",
                            ot_ctx_input_name(ctx, 0), otter_dtype_name(X->dtype), ctx->node->op_type);
    const otter_tensor *same[] = {W, R, B, H0, C0, P};
    for (size_t k = 0; k < sizeof same / sizeof same[0]; k++)
        if (same[k] && same[k]->dtype != X->dtype)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %s has type %s, X has %s",
                                ot_ctx_input_name(ctx, k == 0   ? 1
                                                       : k == 1 ? 2
                                                       : k == 2 ? 3
                                                                : k + 2),
                                otter_dtype_name(same[k]->dtype), otter_dtype_name(X->dtype));
    if (X->rank != 3 || W->rank != 3 || R->rank != 3)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "X, W and R must have rank 3 (got %d, %d, %d)", X->rank, W->rank,
                            R->rank);
    int64_t layout;
    OT_TRY(ot_ctx_attr_int(ctx, "layout", &layout));
    c.layout = (int)layout;
    if (c.layout != 0 && c.layout != 1)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'layout' is %d, expected 0 or 1", c.layout);
    const char *dir;
    OT_TRY(ot_ctx_attr_string(ctx, "direction", &dir));
    if (ot_streq(dir, "forward") || ot_streq(dir, "reverse")) {
        c.D = 1;
        c.reverse_only = dir[0] == 'r';
    } else if (ot_streq(dir, "bidirectional")) {
        c.D = 2;
    } else {
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'direction' is '%s'", dir);
    }
    c.T = X->dims[c.layout ? 1 : 0];
    c.N = X->dims[c.layout ? 0 : 1];
    c.I = X->dims[2];
    c.H = ot_ctx_attr_int_or(ctx, "hidden_size", W->dims[1] / c.G); /* no schema default: W's rows per gate */
    if (c.H <= 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "hidden_size is %lld", (long long)c.H);
    const int64_t GH = c.G * c.H;
    OT_TRY(check_shape(ctx, 1, W, 3, (int64_t[]){c.D, GH, c.I}));
    OT_TRY(check_shape(ctx, 2, R, 3, (int64_t[]){c.D, GH, c.H}));
    if (B) OT_TRY(check_shape(ctx, 3, B, 2, (int64_t[]){c.D, 2 * GH}));
    int64_t sdims[3] = {c.layout ? c.N : c.D, c.layout ? c.D : c.N, c.H};
    if (H0) OT_TRY(check_shape(ctx, 5, H0, 3, sdims));
    if (C0) OT_TRY(check_shape(ctx, 6, C0, 3, sdims));
    if (P) OT_TRY(check_shape(ctx, 7, P, 2, (int64_t[]){c.D, 3 * c.H}));
    const otter_attr *clip = otter_node_attr(ctx->node, "clip");
    if (clip) {
        c.has_clip = true;
        c.clip = clip->f;
    }
    int64_t linear_before_reset = 0, input_forget = 0; /* GRU's and LSTM's own */
    if (cell == CELL_GRU) OT_TRY(ot_ctx_attr_int(ctx, "linear_before_reset", &linear_before_reset));
    if (cell == CELL_LSTM) OT_TRY(ot_ctx_attr_int(ctx, "input_forget", &input_forget));
    c.linear_before_reset = linear_before_reset != 0;
    c.input_forget = input_forget != 0;
    OT_TRY(parse_activations(ctx, &c));

    const int64_t T = c.T, N = c.N, I = c.I, H = c.H, D = c.D;
    /* scratch */
    size_t dsz = sizeof(double);
    int64_t *lens = ot_ctx_scratch(ctx, (size_t)(N > 0 ? N : 1) * sizeof *lens);
    double *x = ot_ctx_scratch(ctx, (size_t)(T * N * I + 1) * dsz);
    double *w = ot_ctx_scratch(ctx, (size_t)(D * GH * (I + H) + 1) * dsz), *r = w + D * GH * I;
    double *bias = ot_ctx_scratch(ctx, (size_t)(D * 2 * GH + D * 3 * H + 1) * dsz), *peep = bias + D * 2 * GH;
    double *hs = ot_ctx_scratch(ctx, (size_t)(2 * D * N * H + 1) * dsz), *cs = hs + D * N * H;
    double *y = ot_ctx_scratch(ctx, (size_t)(T * D * N * H + 1) * dsz);
    rnn_work wk;
    wk.xw = ot_ctx_scratch(ctx, (size_t)(T * N * GH + 1) * dsz);
    wk.gate = ot_ctx_scratch(ctx, (size_t)(N * GH + 2 * N * H + 1) * dsz);
    if (!lens || !x || !w || !bias || !hs || !y || !wk.xw || !wk.gate) return OTTER_ERR_NOMEM;
    wk.hr = wk.gate + N * GH;
    wk.hrh = wk.hr + N * H;

    if (SL && (SL->rank != 1 || SL->dims[0] != N || (SL->dtype != OTTER_DTYPE_INT32 && SL->dtype != OTTER_DTYPE_INT64)))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 4 '%s' must be int32 of shape [%lld]",
                            ot_ctx_input_name(ctx, 4), (long long)N);
    for (int64_t b = 0; b < N; b++) {
        lens[b] = SL ? ot_get_i64(SL->data, SL->dtype, b) : T;
        if (lens[b] < 0 || lens[b] > T)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                                "input 4 '%s' holds length %lld for batch %lld, sequence is %lld",
                                ot_ctx_input_name(ctx, 4), (long long)lens[b], (long long)b, (long long)T);
    }
    for (int64_t t = 0; t < T; t++)
        for (int64_t b = 0; b < N; b++)
            for (int64_t i = 0; i < I; i++) {
                int64_t src = c.layout ? (b * T + t) * I + i : (t * N + b) * I + i;
                x[(t * N + b) * I + i] = ot_get_f64(X->data, X->dtype, src);
            }
    ot_convert(w, OTTER_DTYPE_DOUBLE, W->data, W->dtype, D * GH * I);
    ot_convert(r, OTTER_DTYPE_DOUBLE, R->data, R->dtype, D * GH * H);
    if (B) ot_convert(bias, OTTER_DTYPE_DOUBLE, B->data, B->dtype, D * 2 * GH);
    if (P) ot_convert(peep, OTTER_DTYPE_DOUBLE, P->data, P->dtype, D * 3 * H);
    if (H0)
        read_state(H0, &c, hs);
    else
        memset(hs, 0, (size_t)(D * N * H) * dsz);
    if (C0)
        read_state(C0, &c, cs);
    else
        memset(cs, 0, (size_t)(D * N * H) * dsz);
    memset(y, 0, (size_t)(T * D * N * H) * dsz);

    for (int64_t d = 0; d < D; d++)
        OT_TRY(run_direction(ctx, &c, d, x, w + d * GH * I, r + d * GH * H, B ? bias + d * 2 * GH : NULL,
                             P ? peep + d * 3 * H : NULL, lens, hs + d * N * H, cs + d * N * H, y, &wk));

    if (ctx->n_outputs > 0) {
        int64_t yd[4] = {T, D, N, H};
        if (c.layout) {
            yd[0] = N;
            yd[1] = T;
            yd[2] = D;
        }
        otter_tensor *Y = ot_ctx_output(ctx, 0, X->dtype, 4, yd);
        if (!Y) return ctx->output_status;
        for (int64_t t = 0; t < T; t++)
            for (int64_t d = 0; d < D; d++)
                for (int64_t b = 0; b < N; b++)
                    for (int64_t h = 0; h < H; h++) {
                        int64_t dst = c.layout ? ((b * T + t) * D + d) * H + h : ((t * D + d) * N + b) * H + h;
                        ot_set_f64(Y->data, Y->dtype, dst, y[((t * D + d) * N + b) * H + h]);
                    }
    }
    for (size_t o = 1; o < ctx->n_outputs && o < (cell == CELL_LSTM ? 3u : 2u); o++) {
        otter_tensor *S = ot_ctx_output(ctx, o, X->dtype, 3, sdims);
        if (!S) return ctx->output_status;
        write_state(S, &c, o == 1 ? hs : cs);
    }
    return OTTER_OK;
}

otter_status ot_kernel_rnn(ot_kernel_ctx *ctx) { return rnn_common(ctx, CELL_RNN); }
otter_status ot_kernel_gru(ot_kernel_ctx *ctx) { return rnn_common(ctx, CELL_GRU); }
otter_status ot_kernel_lstm(ot_kernel_ctx *ctx) { return rnn_common(ctx, CELL_LSTM); }
