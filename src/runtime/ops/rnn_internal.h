/* Shared by the recurrent kernels: rnn.c (RNN, GRU, LSTM and the LSTMTraining / GRUTraining forward
 * passes, which also record gate activations) and rnn_train.c (LSTMGrad, GRUGrad, RNNGrad).
 *
 * Every kernel works on buffers of one working type (float, or double for double tensors: see
 * ot_rnn_work_type) laid out [seq, batch, ...] whatever the layout attribute; tensors over all
 * steps (Y, CAll, IOFC, ZRH and their gradients) are [seq][dirs][batch][K] in those buffers and
 * follow Y's layout in the graph. */
#ifndef OTTER_RUNTIME_OPS_RNN_INTERNAL_H
#define OTTER_RUNTIME_OPS_RNN_INTERNAL_H

#include "runtime/ops/kernels.h"

typedef enum ot_rnn_act_kind {
    OT_ACT_RELU,
    OT_ACT_TANH,
    OT_ACT_SIGMOID,
    OT_ACT_AFFINE,
    OT_ACT_LEAKYRELU,
    OT_ACT_THRESHOLDEDRELU,
    OT_ACT_SCALEDTANH,
    OT_ACT_HARDSIGMOID,
    OT_ACT_ELU,
    OT_ACT_SOFTSIGN,
    OT_ACT_SOFTPLUS,
} ot_rnn_act_kind;

typedef struct ot_rnn_act {
    ot_rnn_act_kind kind;
    double alpha, beta;
} ot_rnn_act;

typedef enum ot_rnn_cell { OT_CELL_RNN, OT_CELL_GRU, OT_CELL_LSTM } ot_rnn_cell;

typedef struct ot_rnn_cfg {
    ot_rnn_cell cell;
    int G;     /* gates: 1, 3, 4 */
    int n_act; /* activations per direction: 1, 2, 3 */
    int64_t T, N, I, H, D;
    int layout;
    bool reverse_only;
    bool has_clip;
    double clip;
    bool linear_before_reset; /* GRU */
    bool input_forget;        /* LSTM */
    ot_rnn_act acts[6];       /* [direction * n_act + k] */
} ot_rnn_cfg;

/* The working type for tensors of type t: double for double (the reference the float path is tested
 * against), float for float and float16 (as ONNX Runtime's and PyTorch's float RNNs compute). */
static inline otter_dtype ot_rnn_work_type(otter_dtype t) {
    return t == OTTER_DTYPE_DOUBLE ? OTTER_DTYPE_DOUBLE : OTTER_DTYPE_FLOAT;
}

/* The node's inputs X, W, R, B, sequence_lens, initial_h (, initial_c, P) in the working type wt
 * (the tensors' own data where they already are). */
typedef struct ot_rnn_inputs {
    otter_dtype wt;
    int64_t *lens;    /* [N] */
    const void *x;    /* [T, N, I] */
    const void *w;    /* [D, GH, I] */
    const void *r;    /* [D, GH, H] */
    const void *bias; /* [D, 2 GH] or NULL */
    const void *peep; /* [D, 3H] or NULL */
    const void *h0;   /* [D, N, H] (zeros when omitted) */
    const void *c0;   /* [D, N, H] (zeros when omitted) */
} ot_rnn_inputs;

double ot_rnn_act_apply(const ot_rnn_act *a, double x);
/* The activation's derivative at the point where it returned y (every supported activation's
 * derivative is a function of its output). */
double ot_rnn_act_deriv(const ot_rnn_act *a, double y);

/* Read the attributes and check inputs 0-7 (X, W, R, B, sequence_lens, initial_h, initial_c, P). */
otter_status ot_rnn_config(const ot_kernel_ctx *ctx, ot_rnn_cell cell, ot_rnn_cfg *c);
/* Inputs 0-7 in the working type wt (scratch copies where they need converting or reordering). */
otter_status ot_rnn_load(ot_kernel_ctx *ctx, const ot_rnn_cfg *c, otter_dtype wt, ot_rnn_inputs *in);

/* A [D, N, H] state tensor (layout 0) or [N, D, H] (layout 1) into dst [D][N][H] of type wt. */
void ot_rnn_read_state(const otter_tensor *t, const ot_rnn_cfg *c, otter_dtype wt, void *dst);
/* An all-steps tensor laid out like Y, with K values per (step, direction, batch row), into
 * dst [T][D][N][K] of type wt. */
void ot_rnn_read_seq(const otter_tensor *t, const ot_rnn_cfg *c, int64_t K, otter_dtype wt, void *dst);
/* Allocate output `index` shaped like Y with K values per row and write src [T][D][N][K] (type wt)
 * into it; a state output ([D, N, K] in the layout) when `state`. */
otter_status ot_rnn_write_output(ot_kernel_ctx *ctx, size_t index, const ot_rnn_cfg *c, int64_t K, bool state,
                                 otter_dtype wt, const void *src);

/* Batch row b's time index at step s of direction d (s < lens[b]). */
static inline int64_t ot_rnn_time(const ot_rnn_cfg *c, int64_t d, const int64_t *lens, int64_t b, int64_t s) {
    return c->reverse_only || d == 1 ? lens[b] - 1 - s : s;
}

/* Batch rows per thread for the step loops: one range per thread (each range runs every step, so
 * fewer, larger ranges mean larger per-step products), at least 4 rows. */
static inline int64_t ot_rnn_rows_grain(const ot_kernel_ctx *ctx, int64_t N) {
    int64_t threads = ctx->n_threads > 1 ? ctx->n_threads : 1, grain = (N + threads - 1) / threads;
    return grain > 4 ? grain : 4;
}

/* Products with the weights, per working type (the _f32 / _f64 pairs below; the kernels' shared
 * code is templated over the type, see rnn_forward.inc). An operand B is K x N: b as stored (trans
 * false, ldb >= N) or b's transpose (b is N x K, ldb >= K); it must outlive its products. Float packs
 * B once (scratch) for the portable AVX-512 / AVX2 kernel (ot_sgemm_prepacked: the per-step
 * products are small, [N, H] by [H, GH], where a packed operand and no per-call setup matter most);
 * double keeps the pointer for dgemm. */
typedef struct ot_rnn_operand_f32 {
    int64_t k, n;
    float *packed;
} ot_rnn_operand_f32;

typedef struct ot_rnn_operand_f64 {
    int64_t k, n, ld;
    bool trans;
    const double *m;
} ot_rnn_operand_f64;

otter_status ot_rnn_prepare_f32(ot_kernel_ctx *ctx, bool trans, int64_t K, int64_t N, const float *b, int64_t ldb,
                                ot_rnn_operand_f32 *out);
otter_status ot_rnn_prepare_f64(ot_kernel_ctx *ctx, bool trans, int64_t K, int64_t N, const double *b, int64_t ldb,
                                ot_rnn_operand_f64 *out);
/* c[M x N] = op(a) B + bias in every row (c not read) when bias, else + beta c; op(a) is a (M x K,
 * row stride lda) or its transpose (a is K x M). Pass a NULL ctx inside ot_parallel_for bodies. */
otter_status ot_rnn_product_f32(const ot_kernel_ctx *ctx, bool trans_a, int64_t M, const float *a, int64_t lda,
                                const ot_rnn_operand_f32 *b, const float *bias, float beta, float *c, int64_t ldc);
otter_status ot_rnn_product_f64(const ot_kernel_ctx *ctx, bool trans_a, int64_t M, const double *a, int64_t lda,
                                const ot_rnn_operand_f64 *b, const double *bias, double beta, double *c, int64_t ldc);

/* x[0, n) = a(x[0, n)). Float runs Sigmoid and Tanh, every cell's default gates, through vec_math's
 * vectorized kernels (float accuracy, as ONNX Runtime's and PyTorch's float RNNs have). The other
 * activations, and every activation under `clip`, go through ot_rnn_act_apply in double: the
 * gradient kernels spot a clipped gate by its recorded value being exactly act(+-clip) computed in
 * double and rounded to the tensors' type. */
void ot_rnn_act_row_f32(const ot_rnn_cfg *c, const ot_rnn_act *a, float *x, int64_t n);
void ot_rnn_act_row_f64(const ot_rnn_cfg *c, const ot_rnn_act *a, double *x, int64_t n);

/* The forward pass; with `record`, also outputs the gate activations (LSTM: IOFC as output 4, the
 * cell states CAll as output 3; GRU: ZRH as output 2), as ONNX Runtime's LSTMTraining and
 * GRUTraining do. */
otter_status ot_rnn_forward(ot_kernel_ctx *ctx, ot_rnn_cell cell, bool record);

#endif
