/* Shape inference for the training operators otter runs (com.microsoft, as ONNX Runtime's training
 * graphs use them, and the default-domain names older ORT graphs give the pooling/conv gradients),
 * the runtime's fused com.otter operators, and ai.onnx.preview.training Gradient. Output shapes
 * follow the kernels in runtime/ops (training*.c, sequence.c). */
#include "infer/infer_internal.h"
#include "ops/shape_math.h"

/* ---- helpers ---- */

/* Output i: element type dt and the shape whose values input j holds (a shape tensor), or the
 * rank its length gives when only that is known. */
static otter_status out_shape_from_values(ot_inode *n, size_t i, size_t j, otter_dtype dt) {
    const ot_idim *v;
    int64_t count;
    if (ot_in_ints(n, j, &v, &count)) {
        ot_idim *d = ot_inf_dims(n->cx, (int)count);
        if (!d) return OT_INF_NOMEM(n);
        for (int64_t k = 0; k < count; k++) d[k] = ot_data_to_dim(v[k]);
        return ot_out_shape(n, i, dt, (int)count, d);
    }
    const ot_ival *s = ot_in(n, j);
    int rank = ot_in_has_shape(n, j) && s->rank == 1 && s->dims[0].v >= 0 ? (int)s->dims[0].v : -1;
    return ot_out_shape(n, i, dt, rank, NULL);
}

/* Output i: input j's shape with input k's element type. */
static otter_status out_like_typed(ot_inode *n, size_t i, size_t j, size_t k) {
    const ot_ival *v = ot_in(n, j);
    otter_dtype dt = ot_in_dtype(n, k);
    return ot_in_has_shape(n, j) ? ot_out_shape(n, i, dt, v->rank, v->dims) : ot_out_shape(n, i, dt, -1, NULL);
}

/* Output i: [d] of element type dt. */
static otter_status out_vector(ot_inode *n, size_t i, otter_dtype dt, ot_idim d) {
    return ot_out_shape(n, i, dt, 1, &d);
}

/* ---- accumulation, scaling ---- */

/* (accumulation_buffer, value[, overwrite]) -> updated flag bool [1], the buffer */
otter_status ot_infer_inplace_accumulator_v2(ot_inode *n) {
    OT_TRY(out_vector(n, 0, OTTER_DTYPE_BOOL, ot_dim_known(1)));
    return ot_out_like(n, 1, 0);
}

/* (X1, ...) -> scalar of X1's type */
otter_status ot_infer_reduce_all_l2(ot_inode *n) { return ot_out_shape(n, 0, ot_in_dtype(n, 0), 0, NULL); }

/* ---- matmul, convolution, pooling ---- */

/* Y = alpha * op(A) @ op(B): MatMul's shapes after transBatchA / transBatchB moved the first axis of
 * a rank >= 3 operand to just before its last, and the last two axes of A / B swapped when transA /
 * transB (1-D operands are never transposed) */
otter_status ot_infer_ms_fused_matmul(ot_inode *n) {
    const ot_ival *in[2];
    const char *names[2] = {n->node->inputs[0], n->n_in > 1 ? n->node->inputs[1] : ""};
    const char *trans[2] = {"transA", "transB"}, *trans_batch[2] = {"transBatchA", "transBatchB"};
    for (int k = 0; k < 2; k++) {
        const ot_ival *v = ot_in(n, (size_t)k);
        in[k] = v;
        const bool tr = ot_attr_int(n, trans[k], 0) != 0, tb = ot_attr_int(n, trans_batch[k], 0) != 0;
        if (!ot_in_has_shape(n, (size_t)k) || v->rank < 2 || (!tr && (!tb || v->rank < 3))) continue;
        ot_ival *t = ot_inf_alloc(n->cx, sizeof *t);
        if (!t) return OT_INF_NOMEM(n);
        OT_TRY(ot_ival_copy(n->cx, t, v));
        if (tb && v->rank >= 3) {
            for (int i = 0; i < v->rank - 2; i++) t->dims[i] = v->dims[i + 1];
            t->dims[v->rank - 2] = v->dims[0];
        }
        if (tr) {
            const ot_idim d = t->dims[v->rank - 2];
            t->dims[v->rank - 2] = t->dims[v->rank - 1];
            t->dims[v->rank - 1] = d;
        }
        in[k] = t;
    }
    return ot_infer_as(n, ot_infer_matmul, 13, 2, in, names);
}

/* (dY, X, W) -> dX like X, dW like W, dB [W's output channels]: W.dims[0] for Conv, W.dims[1] *
 * group for ConvTranspose */
static otter_status conv_grads(ot_inode *n, bool transpose) {
    OT_TRY(ot_out_like(n, 0, 1));
    OT_TRY(ot_out_like(n, 1, 2));
    ot_idim m = ot_in_dim(n, 2, transpose ? 1 : 0);
    if (transpose && m.v >= 0)
        m = ot_dim_known(m.v * ot_attr_int(n, "group", 1));
    else if (transpose)
        m = OT_DIM_UNKNOWN;
    return out_vector(n, 2, ot_in_dtype(n, 1), m);
}

otter_status ot_infer_conv_grad(ot_inode *n) { return conv_grads(n, false); }
otter_status ot_infer_conv_transpose_grad(ot_inode *n) { return conv_grads(n, true); }

/* dX of a pooling: X's batch and channels are dY's; its spatial size is not derivable from dY (the
 * kernel reads the declared shape), unless given as input 2 (com.otter MaxPoolGrad's X_shape) */
otter_status ot_infer_pool_grad(ot_inode *n) {
    otter_dtype dt = ot_in_dtype(n, 0);
    if (ot_in(n, 2)) return out_shape_from_values(n, 0, 2, dt);
    const ot_ival *dy = ot_in(n, 0);
    if (!ot_in_has_shape(n, 0)) return ot_out_shape(n, 0, dt, -1, NULL);
    OT_TRY(ot_out_shape(n, 0, dt, dy->rank, NULL));
    for (int i = 0; i < 2 && i < dy->rank; i++) n->out[0].dims[i] = dy->dims[i];
    return OTTER_OK;
}

/* ---- normalization ---- */

/* (dY, X, scale, saved_mean, saved_inv_std) -> dX like X, dScale and dBias [C] */
otter_status ot_infer_batch_norm_grad(ot_inode *n) {
    OT_TRY(ot_out_like(n, 0, 1));
    for (size_t k = 1; k < 3; k++) OT_TRY(out_vector(n, k, ot_in_dtype(n, 1), ot_in_dim(n, 1, 1)));
    return OTTER_OK;
}

/* (dY, X, scale, ...) -> dX like X, dScale (and dBias) like scale in X's type */
otter_status ot_infer_layer_norm_grad(ot_inode *n) {
    OT_TRY(ot_out_like(n, 0, 1));
    for (size_t k = 1; k < n->n_out; k++) OT_TRY(out_like_typed(n, k, 2, 1));
    return OTTER_OK;
}

/* (X, scale) -> Y like X, inv_std_var float32 with the normalized axes (axis..) of size 1 */
otter_status ot_infer_simplified_layer_norm(ot_inode *n) {
    OT_TRY(ot_out_like(n, 0, 0));
    if (n->n_out < 2) return OTTER_OK;
    const ot_ival *x = ot_in(n, 0);
    if (!ot_in_has_shape(n, 0)) return ot_out_shape(n, 1, OTTER_DTYPE_FLOAT, -1, NULL);
    int64_t axis;
    OT_TRY(ot_norm_axis(n, ot_attr_int(n, "axis", -1), x->rank, &axis));
    OT_TRY(ot_out_shape(n, 1, OTTER_DTYPE_FLOAT, x->rank, x->dims));
    for (int i = (int)axis; i < x->rank; i++) n->out[1].dims[i] = ot_dim_known(1);
    return OTTER_OK;
}

/* ---- indexing gradients: dX has the shape a shape input holds ---- */

otter_status ot_infer_gather_grad(ot_inode *n) { return out_shape_from_values(n, 0, 0, ot_in_dtype(n, 2)); }
otter_status ot_infer_gather_elements_grad(ot_inode *n) { return out_shape_from_values(n, 0, 1, ot_in_dtype(n, 0)); }
otter_status ot_infer_gather_nd_grad(ot_inode *n) { return out_shape_from_values(n, 0, 0, ot_in_dtype(n, 2)); }
otter_status ot_infer_slice_grad(ot_inode *n) { return out_shape_from_values(n, 0, 1, ot_in_dtype(n, 0)); }
otter_status ot_infer_pad_grad(ot_inode *n) { return out_shape_from_values(n, 0, 1, ot_in_dtype(n, 0)); }

/* ReduceSumTraining: ReduceSum-13's shapes (axes as input 1) */
otter_status ot_infer_reduce_sum_training(ot_inode *n) {
    int pick[2] = {0, n->n_in > 1 ? 1 : -1};
    return ot_infer_as_picked(n, ot_infer_reduce_sum, 13, 2, pick, false);
}

/* (a_shape, b_shape) -> (a_axes, b_axes): int64 vectors whose lengths depend on the shapes' values */
otter_status ot_infer_broadcast_gradient_args(ot_inode *n) {
    for (size_t i = 0; i < 2; i++) OT_TRY(out_vector(n, i, OTTER_DTYPE_INT64, OT_DIM_UNKNOWN));
    return OTTER_OK;
}

/* Concat's result, and each input's length along axis: int64 [number of inputs] */
otter_status ot_infer_concat_training(ot_inode *n) {
    int *pick = ot_inf_alloc(n->cx, sizeof(int) * (n->n_in + 1));
    if (!pick) return OT_INF_NOMEM(n);
    for (size_t k = 0; k < n->n_in; k++) pick[k] = ot_in(n, k) ? (int)k : -1;
    OT_TRY(ot_infer_as_picked(n, ot_infer_concat, 13, n->n_in, pick, false));
    return out_vector(n, 1, OTTER_DTYPE_INT64, ot_dim_known((int64_t)n->n_in));
}

/* Split's outputs (opset 13 form: split as input 1) */
otter_status ot_infer_split_training(ot_inode *n) {
    static const int pick[] = {0, 1};
    return ot_infer_as_picked(n, ot_infer_split, 13, n->n_in > 1 ? 2 : 1, pick, false);
}

/* ---- losses ---- */

/* SoftmaxCrossEntropyLoss's outputs; ignore_index comes as input 3 instead of an attribute */
otter_status ot_infer_sce_loss_internal(ot_inode *n) {
    static const int pick[] = {0, 1, 2};
    return ot_infer_as_picked(n, ot_infer_sce_loss, 13, n->n_in < 3 ? n->n_in : 3, pick, false);
}

/* (dY, log_prob, label, ...) -> d_logits like log_prob */
otter_status ot_infer_sce_loss_grad(ot_inode *n) { return ot_out_like(n, 0, 1); }

/* ---- optimizers over sequences ---- */

/* Output 0, the "updated" flag, is left to the declaration: the kernels (otter's and ONNX Runtime's)
 * shape it like an input (step, learning_rate) while ORT's own schema infers SGDOptimizerV2's as a
 * scalar (so artifacts declare it that way), and files from 2023 declare it int64 instead of bool. */

/* (lr, step, weights, gradients, momentums_1, momentums_2[, update_signal]) -> flag, the three
 * updated sequences */
otter_status ot_infer_adamw_optimizer(ot_inode *n) {
    OT_TRY(ot_out_like(n, 1, 2));
    OT_TRY(ot_out_like(n, 2, 4));
    return ot_out_like(n, 3, 5);
}

/* (lr, weights, gradients[, update_signal]) -> flag, the updated weights */
otter_status ot_infer_sgd_optimizer_v2(ot_inode *n) { return ot_out_like(n, 1, 1); }

/* ---- the fused operators runtime/fuse.c makes ---- */

otter_status ot_infer_otter_fused_conv(ot_inode *n) {
    /* kernel_parts (runtime/fuse.c: a Concat of convolutions of one input): as a convolution by part 0's
     * weights over kernel_shape, then the channels of all parts (blocked: in 16s) */
    const otter_attr *parts = otter_node_attr(n->node, "kernel_parts");
    static const int pick[] = {0, 1, 2};
    OT_TRY(ot_attr_int(n, "channel_blocks", 0)
               ? ot_infer_blocked_conv(n)
               : ot_infer_as_picked(n, ot_infer_conv, 11, n->n_in < 3 || parts ? 2 : 3, pick, false));
    if (!parts || n->n_out == 0 || n->out[0].rank < 2) return OTTER_OK;
    int64_t M = 0;
    for (size_t i = 0; i < parts->n_ints; i += 5) /* 5 ints a part, channels first (OT_CONV_PART_INTS) */
        M += parts->ints[i];
    const int64_t b = ot_attr_int(n, "channel_blocks", 0);
    n->out[0].dims[1] = ot_dim_known(b > 0 ? M / b : M);
    return OTTER_OK;
}

otter_status ot_infer_otter_fused_gemm(ot_inode *n) {
    static const int pick[] = {0, 1, 2};
    return ot_infer_as_picked(n, ot_infer_gemm, 13, n->n_in < 3 ? n->n_in : 3, pick, false);
}

otter_status ot_infer_otter_fused_matmul(ot_inode *n) {
    static const int pick[] = {0, 1};
    return ot_infer_as_picked(n, ot_infer_matmul, 13, 2, pick, false);
}

/* com.otter AttentionCoreGrad(dY, V, P, Kt, Qs) -> dQs, dKt, dV: dY's batch dims, then the last two dims of
 * Qs, Kt and V, each operand read and written in its layout (runtime/ops/training_attention.c: a rank-3
 * [n, rows, cols] stored as 1 [rows, n, cols], 2 [n, cols, rows], 3 [cols, n, rows]) */
static void attention_layout_dims(const ot_ival *x, int64_t L, ot_idim *d) {
    for (int i = 0; i < x->rank; i++) d[i] = x->dims[L && i < 3 ? ot_head_layout_axes[L][i] : i];
}

otter_status ot_infer_attention_core_grad(ot_inode *n) {
    static const size_t like[3] = {4, 3, 1};
    static const char *const in_layout[5] = {"layout_dY", "layout_V", "layout_P", "layout_Kt", "layout_Qs"};
    static const char *const out_layout[3] = {"layout_dQs", "layout_dKt", "layout_dV"};
    const ot_ival *dy = ot_in(n, 0);
    for (size_t o = 0; o < 3 && o < n->n_out; o++) {
        const ot_ival *x = ot_in(n, like[o]);
        const int64_t Ly = ot_attr_int(n, in_layout[0], 0), Lx = ot_attr_int(n, in_layout[like[o]], 0),
                      Lo = ot_attr_int(n, out_layout[o], 0);
        if (!ot_in_has_shape(n, 0) || !ot_in_has_shape(n, like[o]) || dy->rank < 2 || x->rank < 2 || Ly < 0 || Ly > 3 ||
            Lx < 0 || Lx > 3 || Lo < 0 || Lo > 3 || ((Ly || Lo) && dy->rank != 3) || (Lx && x->rank != 3)) {
            OT_TRY(ot_out_shape(n, o, OTTER_DTYPE_FLOAT, -1, NULL));
            continue;
        }
        ot_idim yd[OTTER_MAX_RANK], xd[OTTER_MAX_RANK], d[OTTER_MAX_RANK];
        attention_layout_dims(dy, Ly, yd);
        attention_layout_dims(x, Lx, xd);
        for (int i = 0; i < dy->rank - 2; i++) d[i] = yd[i];
        d[dy->rank - 2] = xd[x->rank - 2], d[dy->rank - 1] = xd[x->rank - 1];
        if (Lo) { /* stored: n, rows, cols at their layout's axes */
            const ot_idim l[3] = {d[0], d[1], d[2]};
            for (int k = 0; k < 3; k++) d[ot_head_layout_axes[Lo][k]] = l[k];
        }
        OT_TRY(ot_out_shape(n, o, OTTER_DTYPE_FLOAT, dy->rank, d));
    }
    return OTTER_OK;
}

/* ---- ai.onnx.preview.training Gradient: the i-th output is the gradient for the i-th input ---- */

otter_status ot_infer_gradient(ot_inode *n) {
    for (size_t i = 0; i < n->n_out; i++) OT_TRY(ot_out_like(n, i, i));
    return OTTER_OK;
}
