/* Recurrent operators: RNN, GRU and LSTM (opset 7 and 14: layout attribute), and ONNX Runtime's
 * LSTMTraining / GRUTraining, the same forward pass recording what the gradient kernels need.
 *
 * One driver for the three cells, in the working type (float; double for double tensors, the
 * reference the float path is tested against) on buffers laid out [seq, batch, ...] whatever the
 * layout, so the cells see one shape (rnn_forward.inc, compiled once per type):
 *   XW[t, b, G*H] = X[t, b] * W_d^T + Wb (+ Rb where it may be folded in), one product per direction
 *   per step: G[b, :] = XW[t_b, b, :] + H[b] * R_d^T, then the cell's gate arithmetic.
 * With sequence_lens each batch row runs its own length: step s reads time s (forward) or
 * len_b - 1 - s (reverse); rows past their length keep their state and write zeros to Y.
 * Gate orders follow ONNX: GRU z, r, h; LSTM i, o, f, c; peepholes P = [Pi, Po, Pf]. */
#include <ctype.h>
#include <math.h>
#include <stdatomic.h>

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

void ot_rnn_read_state(const otter_tensor *t, const ot_rnn_cfg *c, otter_dtype wt, void *dst) {
    const size_t es = otter_dtype_size(t->dtype), ws = otter_dtype_size(wt);
    for (int64_t d = 0; d < c->D; d++)
        for (int64_t b = 0; b < c->N; b++) {
            int64_t src = c->layout ? b * c->D + d : d * c->N + b;
            ot_convert((char *)dst + (size_t)((d * c->N + b) * c->H) * ws, wt,
                       (const char *)t->data + (size_t)(src * c->H) * es, t->dtype, c->H);
        }
}

/* Row (t, d, b) of an all-steps tensor laid out like Y (a row: its K values). */
static inline int64_t seq_row(const ot_rnn_cfg *c, int64_t t, int64_t d, int64_t b) {
    return c->layout ? (b * c->T + t) * c->D + d : (t * c->D + d) * c->N + b;
}

void ot_rnn_read_seq(const otter_tensor *t, const ot_rnn_cfg *c, int64_t K, otter_dtype wt, void *dst) {
    const size_t es = otter_dtype_size(t->dtype), ws = otter_dtype_size(wt);
    if (!c->layout) { /* the same order */
        ot_convert(dst, wt, t->data, t->dtype, c->T * c->D * c->N * K);
        return;
    }
    for (int64_t s = 0; s < c->T; s++)
        for (int64_t d = 0; d < c->D; d++)
            for (int64_t b = 0; b < c->N; b++)
                ot_convert((char *)dst + (size_t)(((s * c->D + d) * c->N + b) * K) * ws, wt,
                           (const char *)t->data + (size_t)(seq_row(c, s, d, b) * K) * es, t->dtype, K);
}

otter_status ot_rnn_write_output(ot_kernel_ctx *ctx, size_t index, const ot_rnn_cfg *c, int64_t K, bool state,
                                 otter_dtype wt, const void *src) {
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
    const size_t es = otter_dtype_size(Y->dtype), ws = otter_dtype_size(wt);
    if (!c->layout) { /* the same order */
        ot_convert(Y->data, Y->dtype, src, wt, (state ? 1 : c->T) * c->D * c->N * K);
        return OTTER_OK;
    }
    for (int64_t t = 0; t < (state ? 1 : c->T); t++)
        for (int64_t d = 0; d < c->D; d++)
            for (int64_t b = 0; b < c->N; b++) {
                int64_t dst = state ? b * c->D + d : seq_row(c, t, d, b);
                ot_convert((char *)Y->data + (size_t)(dst * K) * es, Y->dtype,
                           (const char *)src + (size_t)(((t * c->D + d) * c->N + b) * K) * ws, wt, K);
            }
    return OTTER_OK;
}

/* Tensor t (n values) in type wt: its own data when it has that type, else a converted scratch copy. */
static const void *as_work_type(ot_kernel_ctx *ctx, const otter_tensor *t, otter_dtype wt, int64_t n) {
    if (t->dtype == wt) return t->data;
    void *buf = ot_ctx_scratch(ctx, (size_t)(n + 1) * otter_dtype_size(wt));
    if (buf) ot_convert(buf, wt, t->data, t->dtype, n);
    return buf;
}

otter_status ot_rnn_load(ot_kernel_ctx *ctx, const ot_rnn_cfg *c, otter_dtype wt, ot_rnn_inputs *in) {
    const otter_tensor *X = ot_ctx_input(ctx, 0), *W = ot_ctx_input(ctx, 1), *R = ot_ctx_input(ctx, 2);
    const otter_tensor *B = ot_ctx_input(ctx, 3), *SL = ot_ctx_input(ctx, 4), *H0 = ot_ctx_input(ctx, 5);
    const otter_tensor *C0 = c->cell == OT_CELL_LSTM ? ot_ctx_input(ctx, 6) : NULL;
    const otter_tensor *P = c->cell == OT_CELL_LSTM ? ot_ctx_input(ctx, 7) : NULL;
    const int64_t T = c->T, N = c->N, I = c->I, H = c->H, D = c->D, GH = c->G * H;
    const size_t ws = otter_dtype_size(wt);
    *in = (ot_rnn_inputs){.wt = wt};
    in->lens = ot_ctx_scratch(ctx, (size_t)(N > 0 ? N : 1) * sizeof *in->lens);
    void *states = ot_ctx_scratch(ctx, (size_t)(2 * D * N * H + 1) * ws);
    if (!in->lens || !states) return OTTER_ERR_NOMEM;
    for (int64_t b = 0; b < N; b++) {
        in->lens[b] = SL ? ot_get_i64(SL->data, SL->dtype, b) : T;
        if (in->lens[b] < 0 || in->lens[b] > T)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                                "input 4 '%s' holds length %lld for batch %lld, sequence is %lld",
                                ot_ctx_input_name(ctx, 4), (long long)in->lens[b], (long long)b, (long long)T);
    }
    if (!c->layout) {
        in->x = as_work_type(ctx, X, wt, T * N * I);
    } else { /* [N, T, I] to [T, N, I] */
        void *x = ot_ctx_scratch(ctx, (size_t)(T * N * I + 1) * ws);
        if (x)
            for (int64_t t = 0; t < T; t++)
                for (int64_t b = 0; b < N; b++)
                    ot_convert((char *)x + (size_t)((t * N + b) * I) * ws, wt,
                               (const char *)X->data + (size_t)((b * T + t) * I) * otter_dtype_size(X->dtype), X->dtype,
                               I);
        in->x = x;
    }
    in->w = as_work_type(ctx, W, wt, D * GH * I);
    in->r = as_work_type(ctx, R, wt, D * GH * H);
    in->bias = B ? as_work_type(ctx, B, wt, D * 2 * GH) : NULL;
    in->peep = P ? as_work_type(ctx, P, wt, D * 3 * H) : NULL;
    if (!in->x || !in->w || !in->r || (B && !in->bias) || (P && !in->peep)) return OTTER_ERR_NOMEM;
    void *h0 = states, *c0 = (char *)states + (size_t)(D * N * H) * ws;
    if (H0)
        ot_rnn_read_state(H0, c, wt, h0);
    else
        memset(h0, 0, (size_t)(D * N * H) * ws);
    if (C0)
        ot_rnn_read_state(C0, c, wt, c0);
    else
        memset(c0, 0, (size_t)(D * N * H) * ws);
    in->h0 = h0;
    in->c0 = c0;
    return OTTER_OK;
}

/* ---- the forward pass --------------------------------------------------------------------- */

otter_status ot_rnn_prepare_f32(ot_kernel_ctx *ctx, bool trans, int64_t K, int64_t N, const float *b, int64_t ldb,
                                ot_rnn_operand_f32 *out) {
    *out = (ot_rnn_operand_f32){K, N, ot_ctx_scratch(ctx, (ot_sgemm_packed_b_size(K, N) + 1) * sizeof(float))};
    if (!out->packed) return OTTER_ERR_NOMEM;
    ot_sgemm_pack_b(ctx, trans, K, N, b, ldb, out->packed);
    return OTTER_OK;
}

otter_status ot_rnn_prepare_f64(ot_kernel_ctx *ctx, bool trans, int64_t K, int64_t N, const double *b, int64_t ldb,
                                ot_rnn_operand_f64 *out) {
    (void)ctx;
    *out = (ot_rnn_operand_f64){K, N, ldb, trans, b};
    return OTTER_OK;
}

otter_status ot_rnn_product_f32(const ot_kernel_ctx *ctx, bool trans_a, int64_t M, const float *a, int64_t lda,
                                const ot_rnn_operand_f32 *b, const float *bias, float beta, float *c, int64_t ldc) {
    return ot_sgemm_prepacked(ctx, trans_a, M, b->n, b->k, 1.0f, a, lda, b->packed, bias ? 1.0f : beta, c, ldc, bias,
                              NULL);
}

otter_status ot_rnn_product_f64(const ot_kernel_ctx *ctx, bool trans_a, int64_t M, const double *a, int64_t lda,
                                const ot_rnn_operand_f64 *b, const double *bias, double beta, double *c, int64_t ldc) {
    OT_TRY(ot_dgemm(ctx, trans_a, b->trans, M, b->n, b->k, 1.0, a, lda, b->m, b->ld, bias ? 0.0 : beta, c, ldc));
    for (int64_t i = 0; bias && i < M; i++)
        for (int64_t k = 0; k < b->n; k++) c[i * ldc + k] += bias[k];
    return OTTER_OK;
}

void ot_rnn_act_row_f32(const ot_rnn_cfg *c, const ot_rnn_act *a, float *x, int64_t n) {
    if (!c->has_clip && (a->kind == OT_ACT_SIGMOID || a->kind == OT_ACT_TANH)) {
        ot_vec_activation(a->kind == OT_ACT_SIGMOID ? OT_VEC_SIGMOID : OT_VEC_TANH, 0, x, NULL, x, n);
        return;
    }
    for (int64_t k = 0; k < n; k++) x[k] = (float)ot_rnn_act_apply(a, x[k]);
}

void ot_rnn_act_row_f64(const ot_rnn_cfg *c, const ot_rnn_act *a, double *x, int64_t n) {
    (void)c;
    for (int64_t k = 0; k < n; k++) x[k] = ot_rnn_act_apply(a, x[k]);
}

#define REAL         float
#define RNN_FN(name) name##_f32
#include "runtime/ops/rnn_forward.inc"
#undef REAL
#undef RNN_FN

#define REAL         double
#define RNN_FN(name) name##_f64
#include "runtime/ops/rnn_forward.inc"
#undef REAL
#undef RNN_FN

otter_status ot_rnn_forward(ot_kernel_ctx *ctx, ot_rnn_cell cell, bool record) {
    ot_rnn_cfg c;
    OT_TRY(ot_rnn_config(ctx, cell, &c));
    ot_rnn_inputs in;
    OT_TRY(ot_rnn_load(ctx, &c, ot_rnn_work_type(ot_ctx_input(ctx, 0)->dtype), &in));
    const int64_t T = c.T, N = c.N, H = c.H, D = c.D, GH = c.G * H;
    const size_t ws = otter_dtype_size(in.wt);
    void *state = ot_ctx_scratch(ctx, (size_t)(2 * D * N * H + 1) * ws);
    void *y = ot_ctx_scratch(ctx, (size_t)(T * D * N * H + 1) * ws);
    void *gates = record ? ot_ctx_scratch(ctx, (size_t)(T * D * N * GH + 1) * ws) : NULL;
    void *cells = record && cell == OT_CELL_LSTM ? ot_ctx_scratch(ctx, (size_t)(T * D * N * H + 1) * ws) : NULL;
    if (!state || !y || (record && !gates) || (record && cell == OT_CELL_LSTM && !cells)) return OTTER_ERR_NOMEM;
    memcpy(state, in.h0, (size_t)(D * N * H) * ws);
    memcpy((char *)state + (size_t)(D * N * H) * ws, in.c0, (size_t)(D * N * H) * ws);
    bool ragged = false; /* rows past their length: zeros in Y and in what is recorded */
    for (int64_t b = 0; b < N; b++) ragged |= in.lens[b] < T;
    if (ragged) {
        memset(y, 0, (size_t)(T * D * N * H) * ws);
        if (gates) memset(gates, 0, (size_t)(T * D * N * GH) * ws);
        if (cells) memset(cells, 0, (size_t)(T * D * N * H) * ws);
    }
    if (in.wt == OTTER_DTYPE_FLOAT)
        OT_TRY(rnn_run_f32(ctx, &c, &in, state, y, gates, cells));
    else
        OT_TRY(rnn_run_f64(ctx, &c, &in, state, y, gates, cells));

    const void *h_last = state, *c_last = (const char *)state + (size_t)(D * N * H) * ws;
    if (ctx->n_outputs > 0) OT_TRY(ot_rnn_write_output(ctx, 0, &c, H, false, in.wt, y));
    for (size_t o = 1; o < ctx->n_outputs && o < (cell == OT_CELL_LSTM ? 3u : 2u); o++)
        OT_TRY(ot_rnn_write_output(ctx, o, &c, H, true, in.wt, o == 1 ? h_last : c_last));
    if (record && cell == OT_CELL_LSTM) {
        if (ctx->n_outputs > 3) OT_TRY(ot_rnn_write_output(ctx, 3, &c, H, false, in.wt, cells));
        if (ctx->n_outputs > 4) OT_TRY(ot_rnn_write_output(ctx, 4, &c, GH, false, in.wt, gates));
    } else if (record && ctx->n_outputs > 2) {
        OT_TRY(ot_rnn_write_output(ctx, 2, &c, GH, false, in.wt, gates));
    }
    return OTTER_OK;
}

otter_status ot_kernel_rnn(ot_kernel_ctx *ctx) { return ot_rnn_forward(ctx, OT_CELL_RNN, false); }
otter_status ot_kernel_gru(ot_kernel_ctx *ctx) { return ot_rnn_forward(ctx, OT_CELL_GRU, false); }
otter_status ot_kernel_lstm(ot_kernel_ctx *ctx) { return ot_rnn_forward(ctx, OT_CELL_LSTM, false); }
