/* Gradient rules for the normalizations (InstanceNormalization, GroupNormalization,
 * RMSNormalization), Attention and resizing (Resize, Upsample). ONNX Runtime's training runtime has
 * no gradient for most of these; where it has one (SimplifiedLayerNormalizationGrad for RMS
 * normalization, ResizeGrad) the rule emits it, and otherwise a com.otter gradient operator
 * (runtime/ops/grad_nn.c) that recomputes the statistics it needs, so the forward node stays the
 * standard operator. */
#include "autodiff/grad.h"
#include "core/core.h"

#define IN(i)  (n->inputs[i])
#define OUT(i) (n->outputs[i])

static bool has_input(const otter_node *n, size_t i) { return i < n->n_inputs && n->inputs[i][0]; }

static otter_dtype elem_type(ot_grad *g, const char *name) {
    const otter_type *t = ot_grad_type(g, name);
    return t && t->has_elem_type ? t->elem_type : OTTER_DTYPE_FLOAT;
}

/* The gradient names of inputs [0, count): "" where an input is absent or needs no gradient. */
static void input_grads(ot_grad *g, const otter_node *n, size_t count, const char **outs) {
    for (size_t i = 0; i < count; i++) {
        outs[i] = has_input(n, i) ? ot_grad_dx(g, i) : NULL;
        if (!outs[i]) outs[i] = "";
    }
}

/* ---- InstanceNormalization, GroupNormalization ------------------------------------------------ */

/* (X, scale, bias) -> Y: com.otter <op>Grad(dY, X, scale) -> dX, dscale, dbias, with the forward
 * node's attributes (epsilon; num_groups). */
static void norm_grad(ot_grad *g, otter_node *n, const char *grad_op) {
    const char *outs[3];
    input_grads(g, n, 3, outs);
    otter_node *x = ot_grad_emit(g, grad_op, "com.otter", 3, (const char *[]){ot_grad_dy(g, 0), IN(0), IN(1)}, 3, outs);
    ot_grad_copy_attrs(g, x, n);
}

void ot_grad_instancenorm(ot_grad *g, otter_node *n) { norm_grad(g, n, "InstanceNormalizationGrad"); }
void ot_grad_groupnorm(ot_grad *g, otter_node *n) { norm_grad(g, n, "GroupNormalizationGrad"); }

/* ---- RMSNormalization ------------------------------------------------------------------------- */

/* Y = X * inv * scale with inv = 1 / sqrt(mean(X^2 over axes [axis, rank)) + epsilon): ONNX Runtime's
 * SimplifiedLayerNormalizationGrad(dY, X, scale, inv) -> dX, dscale, with inv recomputed by
 * ReduceMean (the forward operator has no output for it). That kernel wants the scale at the
 * normalized shape: a scale that broadcasts to it is expanded for dX, and its gradient is
 * sum(dY * X * inv) reduced to the scale's shape. */
void ot_grad_rms_norm(ot_grad *g, otter_node *n) {
    int64_t axis = otter_node_attr_int(n, "axis", -1);
    int rank = ot_grad_rank(g, IN(0));
    if (axis >= 0 && rank < 0)
        OT_GRAD_FAIL(g, OTTER_ERR_UNSUPPORTED, "RMSNormalization gradient with axis %lld needs X's rank",
                     (long long)axis);
    if ((rank >= 0 && (axis < -rank || axis >= rank)) || axis < -OTTER_MAX_RANK)
        OT_GRAD_FAIL(g, OTTER_ERR_INVALID, "RMSNormalization axis %lld out of range for rank %d", (long long)axis,
                     rank);
    /* the normalized axes, negative when X's rank is unknown */
    int64_t last = axis < 0 ? -1 : rank - 1, axes[OTTER_MAX_RANK];
    size_t n_axes = 0;
    for (int64_t a = axis; a <= last; a++) axes[n_axes++] = a;
    otter_dtype dt = elem_type(g, IN(0));
    const char *x = IN(0), *dy = ot_grad_dy(g, 0);
    const char *mean_sq =
        OT_G1(g, "ReduceMean", ot_grad_tmp(g, "mean_square"), OT_G1(g, "Mul", ot_grad_tmp(g, "square"), x, x),
              ot_grad_const_i64(g, "normalized_axes", n_axes, axes, false));
    float eps = otter_node_attr_float(n, "epsilon", 1e-5f);
    const char *inv = OT_G1(
        g, "Reciprocal", ot_grad_tmp(g, "inv_std_var"),
        OT_G1(g, "Sqrt", ot_grad_tmp(g, "rms"),
              OT_G1(g, "Add", ot_grad_tmp(g, "mean_square_eps"), mean_sq, ot_grad_const_f32(g, "epsilon", eps, dt))));
    /* does the scale have the normalized shape? */
    const otter_type *tx = ot_grad_type(g, x), *ts = ot_grad_type(g, IN(1));
    bool full = tx && ts && rank >= 0 && ts->rank == (int)n_axes;
    for (int i = 0; full && i < ts->rank; i++) {
        int64_t d = tx->dims[rank - ts->rank + i].value;
        full = d >= 0 && ts->dims[i].value == d;
    }
    const char *scale = IN(1);
    if (!full) {
        const char *shape = ot_grad_tmp(g, "normalized_shape");
        otter_node *sh = ot_grad_emit(g, "Shape", "", 1, &x, 1, &shape);
        if (sh && otter_node_set_attr_int(sh, "start", axis) != OTTER_OK) OT_GRAD_NOMEM(g);
        scale = OT_G1(g, "Expand", ot_grad_tmp(g, "scale_expanded"), IN(1), shape);
    }
    const char *dx = ot_grad_dx(g, 0), *dscale = ot_grad_needs(g, 1) && full ? ot_grad_dx(g, 1) : NULL;
    const char *outs[2] = {dx ? dx : ot_grad_tmp(g, "unused_dX"), dscale ? dscale : ""};
    if (dx || dscale) {
        otter_node *sl = ot_grad_emit(g, "SimplifiedLayerNormalizationGrad", "com.microsoft", 4,
                                      (const char *[]){dy, x, scale, inv}, 2, outs);
        if (sl && (otter_node_set_attr_int(sl, "axis", axis) != OTTER_OK ||
                   otter_node_set_attr_float(sl, "epsilon", eps) != OTTER_OK))
            OT_GRAD_NOMEM(g);
    }
    if (ot_grad_needs(g, 1) && !full) {
        const char *dy_x = OT_G1(g, "Mul", ot_grad_tmp(g, "dY_X"), dy, x);
        ot_grad_unbroadcast(g, OT_G1(g, "Mul", ot_grad_tmp(g, "dY_X_inv"), dy_x, inv), IN(1), OUT(0), ot_grad_dx(g, 1));
    }
}

/* ---- Resize, Upsample ----------------------------------------------------------------------------- */

/* ONNX Runtime's ResizeGrad(dY, X, roi, scales) -> dX with Resize's attributes: the adjoint of the
 * interpolation, for every mode. With sizes instead of scales, dY's shape stands for the sizes.
 * Upsample and Resize-10 are Resize with the asymmetric coordinates and floor rounding of those
 * versions; Upsample-7's scales attribute becomes an initializer. */
void ot_grad_resize(ot_grad *g, otter_node *n) {
    bool upsample = ot_streq(n->op_type, "Upsample");
    int64_t opset = ot_grad_opset(g);
    bool v11 = !upsample && opset >= 11;
    const char *roi = "", *scales = "";
    if (upsample && opset < 9) {
        const otter_attr *a = otter_node_attr(n, "scales");
        if (!a || a->type != OTTER_ATTR_FLOATS)
            OT_GRAD_FAIL(g, OTTER_ERR_INVALID, "Upsample needs the attribute 'scales' before opset 9");
        otter_tensor *t;
        int64_t count = (int64_t)a->n_floats;
        scales = ot_grad_tmp(g, "scales");
        if (otter_tensor_from_data(&t, scales, OTTER_DTYPE_FLOAT, 1, &count, a->floats) != OTTER_OK) OT_GRAD_NOMEM(g);
        if (otter_graph_add_initializer(ot_grad_graph(g), t) != OTTER_OK) OT_GRAD_NOMEM(g);
    } else if (!v11) {
        scales = IN(1);
    } else {
        if (has_input(n, 1)) roi = IN(1);
        if (has_input(n, 2)) scales = IN(2);
        const char *policy = otter_node_attr_string(n, "keep_aspect_ratio_policy", "stretch");
        if (has_input(n, 3) && !ot_streq(policy, "stretch"))
            OT_GRAD_FAIL(g, OTTER_ERR_UNSUPPORTED, "Resize gradient with sizes and keep_aspect_ratio_policy '%s'",
                         policy);
    }
    const char *dx = ot_grad_dx(g, 0);
    otter_node *x = ot_grad_emit(g, "ResizeGrad", "com.microsoft", 4,
                                 (const char *[]){ot_grad_dy(g, 0), IN(0), roi, scales}, 1, &dx);
    if (!x) return;
    if (v11) {
        ot_grad_copy_attrs(g, x, n);
        return;
    }
    if (otter_node_set_attr_string(x, "mode", otter_node_attr_string(n, "mode", "nearest")) != OTTER_OK ||
        otter_node_set_attr_string(x, "coordinate_transformation_mode", "asymmetric") != OTTER_OK ||
        otter_node_set_attr_string(x, "nearest_mode", "floor") != OTTER_OK)
        OT_GRAD_NOMEM(g);
}

/* ---- Attention ------------------------------------------------------------------------------------ */

/* Attention-23 (Q, K, V[, attn_mask, past_key, past_value]) -> Y: com.otter AttentionGrad(dY, Q, K, V[,
 * attn_mask, past_key, past_value]) -> dQ, dK, dV[, d_attn_mask, d_past_key, d_past_value] with the
 * forward node's attributes. One fused kernel recomputes each head's probabilities (the forward pass
 * keeps none) and runs the four products of the MatMul / Softmax decomposition on them; a float mask
 * (a learned bias such as T5's relative positions) gets the scores' gradient, a KV cache (prefix
 * tuning's learned one) its keys' and values'. Not covered: gradients arriving through the present
 * or qk_matmul_output outputs, and Attention-24's nonpad_kv_seqlen. */
void ot_grad_attention(ot_grad *g, otter_node *n) {
    if (has_input(n, 6))
        OT_GRAD_FAIL(g, OTTER_ERR_UNSUPPORTED, "Attention gradient with nonpad_kv_seqlen ('%s')", IN(6));
    for (size_t i = 1; i < n->n_outputs; i++)
        if (ot_grad_dy(g, i))
            OT_GRAD_FAIL(g, OTTER_ERR_UNSUPPORTED, "Attention gradient through output %zu ('%s')", i, n->outputs[i]);
    size_t n_in = 3;
    for (size_t i = 3; i < 6; i++)
        if (has_input(n, i)) n_in = i + 1;
    const char *outs[6], *ins[7] = {ot_grad_dy(g, 0)};
    input_grads(g, n, n_in, outs);
    for (size_t i = 0; i < n_in; i++) ins[i + 1] = has_input(n, i) ? IN(i) : "";
    otter_node *x = ot_grad_emit(g, "AttentionGrad", "com.otter", n_in + 1, ins, n_in, outs);
    ot_grad_copy_attrs(g, x, n);
}

/* SimplifiedLayerNormalization (RMSNorm as ONNX Runtime writes it, in either domain): ORT's
 * SimplifiedLayerNormalizationGrad, from the inverse RMS the forward node saves as output 1. */
void ot_grad_simplified_layernorm(ot_grad *g, otter_node *n) {
    const char *inv = ot_grad_forward_output(g, n, 1, "saved_inv_std_var");
    const char *outs[2];
    for (size_t i = 0; i < 2; i++) {
        outs[i] = ot_grad_dx(g, i);
        if (!outs[i]) outs[i] = ot_grad_tmp(g, "unused_grad");
    }
    otter_node *x = ot_grad_emit(g, "SimplifiedLayerNormalizationGrad", "com.microsoft", 4,
                                 (const char *[]){ot_grad_dy(g, 0), IN(0), IN(1), inv}, 2, outs);
    ot_grad_copy_attrs(g, x, n);
}

/* RotaryEmbedding rotates pairs of X's elements by angles whose cos and sin the caches hold:
 * (x1, x2) -> (x1 cos - x2 sin, x1 sin + x2 cos), linear in X. Its transpose is the rotation by
 * the opposite angle: dX = RotaryEmbedding(dY, cos, -sin, position_ids) with the same attributes. */
void ot_grad_rotary_embedding(ot_grad *g, otter_node *n) {
    const char *dx = ot_grad_dx(g, 0);
    const char *neg_sin = OT_G1(g, "Neg", ot_grad_tmp(g, "neg_sin_cache"), IN(2));
    bool has_pos = n->n_inputs > 3 && IN(3)[0];
    otter_node *r = ot_grad_emit(g, "RotaryEmbedding", "", has_pos ? 4 : 3,
                                 (const char *[]){ot_grad_dy(g, 0), IN(1), neg_sin, has_pos ? IN(3) : ""}, 1, &dx);
    ot_grad_copy_attrs(g, r, n);
}
