/* Gradient rules for elementwise operators. Each writes d(input) from d(output), undoing
 * broadcasting where the operator broadcasts. */
#include <math.h>

#include "autodiff/grad.h"
#include "core/core.h"

#define IN(i)  (n->inputs[i])
#define OUT(i) (n->outputs[i])

static otter_dtype elem_type(ot_grad *g, const char *name) {
    const otter_type *t = ot_grad_type(g, name);
    return t && t->has_elem_type ? t->elem_type : OTTER_DTYPE_FLOAT;
}

/* A scalar constant of the dtype of `like`. */
static const char *scalar(ot_grad *g, const char *like, float v) {
    return ot_grad_const_f32(g, "const", v, elem_type(g, like));
}

/* Cast x to dtype `to`, written to `out`; returns out (NULL on failure). */
static const char *cast(ot_grad *g, const char *x, otter_dtype to, const char *out) {
    otter_node *c = ot_grad_emit(g, "Cast", "", 1, &x, 1, &out);
    if (c && otter_node_set_attr_int(c, "to", to) != OTTER_OK) ot_grad_fail(g, OTTER_ERR_NOMEM, "out of memory");
    return c && !ot_grad_failed(g) ? out : NULL;
}

/* d(input i) = unbroadcast(value) for a binary broadcasting op. */
static void to_input(ot_grad *g, otter_node *n, size_t i, const char *value) {
    const char *dx = ot_grad_dx(g, i);
    if (dx) ot_grad_unbroadcast(g, value, IN(i), OUT(0), dx);
}

void ot_grad_add(ot_grad *g, otter_node *n) {
    const char *dy = ot_grad_dy(g, 0);
    if (ot_grad_needs(g, 0)) to_input(g, n, 0, dy);
    if (ot_grad_needs(g, 1)) to_input(g, n, 1, dy);
}

void ot_grad_sub(ot_grad *g, otter_node *n) {
    const char *dy = ot_grad_dy(g, 0);
    if (ot_grad_needs(g, 0)) to_input(g, n, 0, dy);
    if (ot_grad_needs(g, 1)) to_input(g, n, 1, OT_G1(g, "Neg", ot_grad_tmp(g, "neg_dY"), dy));
}

void ot_grad_mul(ot_grad *g, otter_node *n) {
    const char *dy = ot_grad_dy(g, 0);
    if (ot_grad_needs(g, 0)) to_input(g, n, 0, OT_G1(g, "Mul", ot_grad_tmp(g, "PreReduceGrad0"), dy, IN(1)));
    if (ot_grad_needs(g, 1)) to_input(g, n, 1, OT_G1(g, "Mul", ot_grad_tmp(g, "PreReduceGrad1"), dy, IN(0)));
}

/* Y = A / B: dA = dY / B, dB = -dY * Y / B. */
void ot_grad_div(ot_grad *g, otter_node *n) {
    const char *dy = ot_grad_dy(g, 0);
    if (ot_grad_needs(g, 0)) to_input(g, n, 0, OT_G1(g, "Div", ot_grad_tmp(g, "PreReduceGrad0"), dy, IN(1)));
    if (ot_grad_needs(g, 1)) {
        const char *y_over_b = OT_G1(g, "Div", ot_grad_tmp(g, "Y_over_B"), OUT(0), IN(1));
        const char *prod = OT_G1(g, "Mul", ot_grad_tmp(g, "dY_Y_over_B"), dy, y_over_b);
        to_input(g, n, 1, OT_G1(g, "Neg", ot_grad_tmp(g, "PreReduceGrad1"), prod));
    }
}

void ot_grad_neg(ot_grad *g, otter_node *n) { OT_G1(g, "Neg", ot_grad_dx(g, 0), ot_grad_dy(g, 0)); }
void ot_grad_identity(ot_grad *g, otter_node *n) { OT_G1(g, "Identity", ot_grad_dx(g, 0), ot_grad_dy(g, 0)); }

/* Y = A ^ B: dA = dY * B * A^(B-1); dB = dY * Y * log(A). */
void ot_grad_pow(ot_grad *g, otter_node *n) {
    const char *dy = ot_grad_dy(g, 0);
    if (ot_grad_needs(g, 0)) {
        const char *b = IN(1);
        if (!otter_dtype_is_float(elem_type(g, b))) b = cast(g, b, elem_type(g, IN(0)), ot_grad_tmp(g, "B_cast"));
        const char *bm1 = OT_G1(g, "Sub", ot_grad_tmp(g, "Sub_I1"), b, scalar(g, IN(0), 1.0f));
        const char *pw = OT_G1(g, "Pow", ot_grad_tmp(g, "Pow_I0"), IN(0), bm1);
        const char *scaled = OT_G1(g, "Mul", ot_grad_tmp(g, "Mul_Pow_I0_I1"), pw, b);
        to_input(g, n, 0, OT_G1(g, "Mul", ot_grad_tmp(g, "PreReduceGrad0"), scaled, dy));
    }
    if (ot_grad_needs(g, 1)) {
        const char *lg = OT_G1(g, "Log", ot_grad_tmp(g, "Log_I0"), IN(0));
        const char *yl = OT_G1(g, "Mul", ot_grad_tmp(g, "Y_Log_I0"), OUT(0), lg);
        to_input(g, n, 1, OT_G1(g, "Mul", ot_grad_tmp(g, "PreReduceGrad1"), yl, dy));
    }
}

/* Y = sqrt(X): dX = dY * 0.5 / Y. */
void ot_grad_sqrt(ot_grad *g, otter_node *n) {
    const char *half = OT_G1(g, "Mul", ot_grad_tmp(g, "half_dY"), ot_grad_dy(g, 0), scalar(g, IN(0), 0.5f));
    OT_G1(g, "Div", ot_grad_dx(g, 0), half, OUT(0));
}

void ot_grad_exp(ot_grad *g, otter_node *n) { OT_G1(g, "Mul", ot_grad_dx(g, 0), ot_grad_dy(g, 0), OUT(0)); }
void ot_grad_log(ot_grad *g, otter_node *n) { OT_G1(g, "Div", ot_grad_dx(g, 0), ot_grad_dy(g, 0), IN(0)); }
void ot_grad_reciprocal(ot_grad *g, otter_node *n) {
    /* Y = 1/X: dX = -dY * Y^2 */
    const char *y2 = OT_G1(g, "Mul", ot_grad_tmp(g, "Y2"), OUT(0), OUT(0));
    const char *p = OT_G1(g, "Mul", ot_grad_tmp(g, "dY_Y2"), ot_grad_dy(g, 0), y2);
    OT_G1(g, "Neg", ot_grad_dx(g, 0), p);
}

void ot_grad_abs(ot_grad *g, otter_node *n) {
    const char *sign = OT_G1(g, "Sign", ot_grad_tmp(g, "Sign_Input"), IN(0));
    OT_G1(g, "Mul", ot_grad_dx(g, 0), ot_grad_dy(g, 0), sign);
}

/* Activations ONNX Runtime differentiates with its own kernels, from the output. */
static void ms_grad_from_output(ot_grad *g, otter_node *n, const char *op) {
    const char *dx = ot_grad_dx(g, 0);
    ot_grad_emit(g, op, "com.microsoft", 2, (const char *[]){ot_grad_dy(g, 0), OUT(0)}, 1, &dx);
}

/* What ReluGrad reads for Relu's output y (it reads only where that is > 0): y itself, or the output
 * of the ai.onnx Dropout that is y's one reader (a transformer's feed-forward block: Linear, Relu,
 * Dropout, Linear). That output is > 0 exactly where y is and the mask kept the element, and the
 * mask zeroes every other element's gradient; the next Linear's weight gradient keeps it anyway. So
 * y dies in the forward pass: 16 MB a layer of a d=256 encoder's training step at batch 32. */
static const char *relu_sign_source(ot_grad *g, const char *y) {
    otter_graph *gr = ot_grad_graph(g);
    const otter_node *reader = NULL;
    for (size_t i = 0; i < gr->n_nodes; i++)
        for (size_t k = 0; k < gr->nodes[i]->n_inputs; k++)
            if (ot_streq(gr->nodes[i]->inputs[k], y)) {
                if (reader || k != 0) return y;
                reader = gr->nodes[i];
            }
    bool dropout = reader && ot_str_empty(reader->domain) && ot_streq(reader->op_type, "Dropout");
    return dropout && otter_graph_find_output(gr, y) < 0 ? reader->outputs[0] : y;
}

void ot_grad_relu(ot_grad *g, otter_node *n) {
    const char *dx = ot_grad_dx(g, 0);
    ot_grad_emit(g, "ReluGrad", "com.microsoft", 2, (const char *[]){ot_grad_dy(g, 0), relu_sign_source(g, OUT(0))}, 1,
                 &dx);
}
void ot_grad_sigmoid(ot_grad *g, otter_node *n) { ms_grad_from_output(g, n, "SigmoidGrad"); }
void ot_grad_tanh(ot_grad *g, otter_node *n) { ms_grad_from_output(g, n, "TanhGrad"); }

/* The Gelu family, from the input: com.microsoft Gelu, FastGelu(X, bias?), BiasGelu(A, B) and
 * ai.onnx Gelu (opset 20). FastGelu is the tanh approximation ai.onnx Gelu computes with
 * approximate = "tanh", so both take FastGeluGrad. With a bias (added over the last axis before
 * the activation), ORT's Bias*GeluGrad_dX gives d(A + B), and dB sums it over the other axes. */
void ot_grad_gelu(ot_grad *g, otter_node *n) {
    bool tanh_form =
        ot_streq(n->op_type, "FastGelu") || ot_streq(otter_node_attr_string(n, "approximate", "none"), "tanh");
    bool biased = n->n_inputs > 1 && IN(1)[0];
    const char *op =
        !biased ? (tanh_form ? "FastGeluGrad" : "GeluGrad") : (tanh_form ? "BiasFastGeluGrad_dX" : "BiasGeluGrad_dX");
    const char *da = ot_grad_dx(g, 0), *db = biased ? ot_grad_dx(g, 1) : NULL;
    const char *d_sum = da ? da : ot_grad_tmp(g, "dA_plus_B");
    ot_grad_emit(g, op, "com.microsoft", biased ? 3 : 2, (const char *[]){ot_grad_dy(g, 0), IN(0), biased ? IN(1) : ""},
                 1, &d_sum);
    if (db) ot_grad_unbroadcast(g, d_sum, IN(1), OUT(0), db);
}

/* com.microsoft Scale(X, scale; scale_down): linear in X, so dX = Scale(dY, scale) alike. */
void ot_grad_ms_scale(ot_grad *g, otter_node *n) {
    const char *dx = ot_grad_dx(g, 0);
    otter_node *x = ot_grad_emit(g, "Scale", "com.microsoft", 2, (const char *[]){ot_grad_dy(g, 0), IN(1)}, 1, &dx);
    ot_grad_copy_attrs(g, x, n);
}

/* LeakyRelu: dX = dY where X > 0, alpha * dY elsewhere. */
void ot_grad_leaky_relu(ot_grad *g, otter_node *n) {
    float alpha = otter_node_attr_float(n, "alpha", 0.01f);
    const char *dy = ot_grad_dy(g, 0);
    const char *pos = OT_G1(g, "Greater", ot_grad_tmp(g, "positive"), IN(0), scalar(g, IN(0), 0.0f));
    const char *scaled = OT_G1(g, "Mul", ot_grad_tmp(g, "alpha_dY"), dy, scalar(g, IN(0), alpha));
    OT_G1(g, "Where", ot_grad_dx(g, 0), pos, dy, scaled);
}

/* HardSigmoid, y = max(0, min(1, alpha * X + beta)): dX = alpha * dY where 0 < alpha * X + beta < 1. */
void ot_grad_hard_sigmoid(ot_grad *g, otter_node *n) {
    float alpha = otter_node_attr_float(n, "alpha", 0.2f), beta = otter_node_attr_float(n, "beta", 0.5f);
    const char *t =
        OT_G1(g, "Add", ot_grad_tmp(g, "alpha_X_beta"),
              OT_G1(g, "Mul", ot_grad_tmp(g, "alpha_X"), IN(0), scalar(g, IN(0), alpha)), scalar(g, IN(0), beta));
    const char *inside = OT_G1(g, "And", ot_grad_tmp(g, "linear"),
                               OT_G1(g, "Greater", ot_grad_tmp(g, "above_0"), t, scalar(g, IN(0), 0.0f)),
                               OT_G1(g, "Less", ot_grad_tmp(g, "below_1"), t, scalar(g, IN(0), 1.0f)));
    const char *scaled = OT_G1(g, "Mul", ot_grad_tmp(g, "alpha_dY"), ot_grad_dy(g, 0), scalar(g, IN(0), alpha));
    OT_G1(g, "Where", ot_grad_dx(g, 0), inside, scaled, scalar(g, IN(0), 0.0f));
}

/* HardSwish, y = X * max(0, min(1, X / 6 + 1/2)): dX = 0 for X < -3, dY for X > 3, dY * (X / 3 + 1/2)
 * between (PyTorch's hardswish_backward). */
void ot_grad_hard_swish(ot_grad *g, otter_node *n) {
    const char *dy = ot_grad_dy(g, 0);
    const char *slope =
        OT_G1(g, "Add", ot_grad_tmp(g, "slope"),
              OT_G1(g, "Mul", ot_grad_tmp(g, "X_third"), IN(0), scalar(g, IN(0), 1.0f / 3.0f)), scalar(g, IN(0), 0.5f));
    const char *mid = OT_G1(g, "Mul", ot_grad_tmp(g, "slope_dY"), dy, slope);
    const char *upper = OT_G1(g, "Where", ot_grad_tmp(g, "upper"),
                              OT_G1(g, "Greater", ot_grad_tmp(g, "above_3"), IN(0), scalar(g, IN(0), 3.0f)), dy, mid);
    OT_G1(g, "Where", ot_grad_dx(g, 0), OT_G1(g, "Less", ot_grad_tmp(g, "below_-3"), IN(0), scalar(g, IN(0), -3.0f)),
          scalar(g, IN(0), 0.0f), upper);
}

/* Erf: dX = dY * 2/sqrt(pi) * exp(-X^2). */
void ot_grad_erf(ot_grad *g, otter_node *n) {
    const char *x2 = OT_G1(g, "Mul", ot_grad_tmp(g, "X2"), IN(0), IN(0));
    const char *e = OT_G1(g, "Exp", ot_grad_tmp(g, "exp_neg_X2"), OT_G1(g, "Neg", ot_grad_tmp(g, "neg_X2"), x2));
    const char *s = OT_G1(g, "Mul", ot_grad_tmp(g, "scaled"), e, scalar(g, IN(0), (float)(2.0 / sqrt(M_PI))));
    OT_G1(g, "Mul", ot_grad_dx(g, 0), ot_grad_dy(g, 0), s);
}

/* Clip: dY passes to X where min <= X <= max (the subgradient 1 at the bounds, as PyTorch), to the
 * min input where X < min and to the max input where X > max (summed, as the bounds are scalars).
 * In standard operators, so artifacts stay ONNX Runtime's (it has no Clip gradient of its own); the
 * session fuses dX's Less / Greater / Or / Where into one com.otter ClipGrad (runtime/fuse.c). */
void ot_grad_clip(ot_grad *g, otter_node *n) {
    const char *dy = ot_grad_dy(g, 0), *zero = scalar(g, IN(0), 0.0f);
    bool attr_form = ot_grad_opset(g) < 11;
    const char *lo = NULL, *hi = NULL;
    if (attr_form) {
        if (otter_node_attr(n, "min")) lo = scalar(g, IN(0), otter_node_attr_float(n, "min", 0));
        if (otter_node_attr(n, "max")) hi = scalar(g, IN(0), otter_node_attr_float(n, "max", 0));
    } else {
        lo = n->n_inputs > 1 && IN(1)[0] ? IN(1) : NULL;
        hi = n->n_inputs > 2 && IN(2)[0] ? IN(2) : NULL;
    }
    const char *below = lo ? OT_G1(g, "Less", ot_grad_tmp(g, "below"), IN(0), lo) : NULL;
    const char *above = hi ? OT_G1(g, "Greater", ot_grad_tmp(g, "above"), IN(0), hi) : NULL;
    if (below && ot_grad_needs(g, 1)) to_input(g, n, 1, OT_G1(g, "Where", ot_grad_tmp(g, "dY_below"), below, dy, zero));
    if (above && ot_grad_needs(g, 2)) to_input(g, n, 2, OT_G1(g, "Where", ot_grad_tmp(g, "dY_above"), above, dy, zero));
    if (!ot_grad_needs(g, 0)) return;
    const char *outside = below && above ? OT_G1(g, "Or", ot_grad_tmp(g, "outside"), below, above)
                          : below        ? below
                                         : above;
    if (!outside) {
        OT_G1(g, "Identity", ot_grad_dx(g, 0), dy);
        return;
    }
    OT_G1(g, "Where", ot_grad_dx(g, 0), outside, zero, dy);
}

void ot_grad_where(ot_grad *g, otter_node *n) {
    const char *dy = ot_grad_dy(g, 0), *zero = scalar(g, OUT(0), 0.0f);
    if (ot_grad_needs(g, 1)) to_input(g, n, 1, OT_G1(g, "Where", ot_grad_tmp(g, "dX"), IN(0), dy, zero));
    if (ot_grad_needs(g, 2)) to_input(g, n, 2, OT_G1(g, "Where", ot_grad_tmp(g, "dY"), IN(0), zero, dy));
}

void ot_grad_sum(ot_grad *g, otter_node *n) {
    const char *dy = ot_grad_dy(g, 0);
    for (size_t i = 0; i < n->n_inputs; i++)
        if (ot_grad_needs(g, i)) to_input(g, n, i, dy);
}

void ot_grad_mean(ot_grad *g, otter_node *n) {
    const char *scaled =
        OT_G1(g, "Div", ot_grad_tmp(g, "dY_mean"), ot_grad_dy(g, 0), scalar(g, OUT(0), (float)n->n_inputs));
    for (size_t i = 0; i < n->n_inputs; i++)
        if (ot_grad_needs(g, i)) to_input(g, n, i, scaled);
}

void ot_grad_cast(ot_grad *g, otter_node *n) { cast(g, ot_grad_dy(g, 0), elem_type(g, IN(0)), ot_grad_dx(g, 0)); }

/* Max / Min (variadic, broadcasting): dY goes to the inputs equal to Y, split evenly among tied ones.
 * For two inputs a tie gives each half, as PyTorch's torch.maximum / torch.minimum backward does;
 * for more, 1/k to each of k tied inputs keeps the parts summing to dY (as torch.amax). */
void ot_grad_min_max(ot_grad *g, otter_node *n) {
    const char **masks = ot_calloc(n->n_inputs ? n->n_inputs : 1, sizeof *masks);
    if (!masks) OT_GRAD_NOMEM(g);
    for (size_t i = 0; i < n->n_inputs; i++) {
        const char *eq = OT_G1(g, "Equal", ot_grad_tmp(g, "selected"), IN(i), OUT(0));
        masks[i] = cast(g, eq, elem_type(g, OUT(0)), ot_grad_tmp(g, "selected_f"));
    }
    const char *ties = n->n_inputs > 1 ? ot_grad_op1(g, "Sum", ot_grad_tmp(g, "ties"), n->n_inputs, masks) : NULL;
    const char *share = ties ? OT_G1(g, "Div", ot_grad_tmp(g, "dY_share"), ot_grad_dy(g, 0), ties) : ot_grad_dy(g, 0);
    for (size_t i = 0; i < n->n_inputs; i++)
        if (ot_grad_needs(g, i)) to_input(g, n, i, OT_G1(g, "Mul", ot_grad_tmp(g, "PreReduceGrad"), share, masks[i]));
    ot_free(masks);
}

/* Floor, Ceil, Round, Sign: piecewise constant, so dX = 0 (as PyTorch), letting models that contain them
 * train the parameters before and after. */
void ot_grad_zero(ot_grad *g, otter_node *n) {
    const char *dx = ot_grad_dx(g, 0);
    if (dx) ot_grad_zeros_like(g, IN(0), NULL, dx);
}

/* Shrink: X -/+ bias outside [-lambd, lambd], 0 inside, so dX = dY where |X| > lambd, else 0. */
void ot_grad_shrink(ot_grad *g, otter_node *n) {
    const char *x = IN(0);
    const char *outside = OT_G1(g, "Greater", ot_grad_tmp(g, "outside"), OT_G1(g, "Abs", ot_grad_tmp(g, "abs_X"), x),
                                scalar(g, x, otter_node_attr_float(n, "lambd", 0.5f)));
    OT_G1(g, "Mul", ot_grad_dx(g, 0), ot_grad_dy(g, 0), cast(g, outside, elem_type(g, x), ot_grad_tmp(g, "mask")));
}

/* Trilu keeps a triangle of X: dX = the same triangle of dY. */
void ot_grad_trilu(ot_grad *g, otter_node *n) {
    const char *dx = ot_grad_dx(g, 0);
    bool has_k = n->n_inputs > 1 && IN(1)[0];
    otter_node *t =
        ot_grad_emit(g, "Trilu", "", has_k ? 2 : 1, (const char *[]){ot_grad_dy(g, 0), has_k ? IN(1) : ""}, 1, &dx);
    ot_grad_copy_attrs(g, t, n);
}

/* ---- activations and trigonometric functions: dX = dY * f'(X), in ONNX operators ---- */

static const char *op1(ot_grad *g, const char *op, const char *hint, const char *x) {
    return OT_G1(g, op, ot_grad_tmp(g, hint), x);
}
static const char *op2(ot_grad *g, const char *op, const char *hint, const char *a, const char *b) {
    return OT_G1(g, op, ot_grad_tmp(g, hint), a, b);
}
/* dX = dY * factor. */
static void dy_times(ot_grad *g, const char *factor) { OT_G1(g, "Mul", ot_grad_dx(g, 0), ot_grad_dy(g, 0), factor); }
/* dX = dY / divisor. */
static void dy_over(ot_grad *g, const char *divisor) { OT_G1(g, "Div", ot_grad_dx(g, 0), ot_grad_dy(g, 0), divisor); }
/* dX = dY where X > 0, negative_part elsewhere (the Elu family). */
static void positive_or(ot_grad *g, otter_node *n, const char *negative_part) {
    const char *pos = op2(g, "Greater", "positive", IN(0), scalar(g, IN(0), 0.0f));
    OT_G1(g, "Where", ot_grad_dx(g, 0), pos, ot_grad_dy(g, 0), negative_part);
}

/* Elu, Y = alpha * (exp(X) - 1) for X < 0: there dX = dY * (Y + alpha). */
void ot_grad_elu(ot_grad *g, otter_node *n) {
    const char *alpha = scalar(g, IN(0), otter_node_attr_float(n, "alpha", 1.0f));
    positive_or(g, n, op2(g, "Mul", "dY_neg", ot_grad_dy(g, 0), op2(g, "Add", "Y_alpha", OUT(0), alpha)));
}

/* Selu, Y = gamma * X for X > 0, gamma * alpha * (exp(X) - 1) elsewhere: dX = gamma * dY, or
 * dY * (Y + gamma * alpha). */
void ot_grad_selu(ot_grad *g, otter_node *n) {
    float alpha = otter_node_attr_float(n, "alpha", 1.67326319217681884765625f);
    float gamma = otter_node_attr_float(n, "gamma", 1.05070102214813232421875f);
    const char *dy = ot_grad_dy(g, 0);
    const char *neg =
        op2(g, "Mul", "dY_neg", dy, op2(g, "Add", "Y_gamma_alpha", OUT(0), scalar(g, IN(0), gamma * alpha)));
    const char *pos = op2(g, "Mul", "gamma_dY", dy, scalar(g, IN(0), gamma));
    OT_G1(g, "Where", ot_grad_dx(g, 0), op2(g, "Greater", "positive", IN(0), scalar(g, IN(0), 0.0f)), pos, neg);
}

/* Celu, Y = alpha * (exp(X / alpha) - 1) for X <= 0: there dX = dY * (Y / alpha + 1). */
void ot_grad_celu(ot_grad *g, otter_node *n) {
    const char *alpha = scalar(g, IN(0), otter_node_attr_float(n, "alpha", 1.0f));
    const char *e = op2(g, "Add", "exp_X_alpha", op2(g, "Div", "Y_alpha", OUT(0), alpha), scalar(g, IN(0), 1.0f));
    positive_or(g, n, op2(g, "Mul", "dY_neg", ot_grad_dy(g, 0), e));
}

/* ThresholdedRelu: dX = dY where X > alpha, 0 elsewhere. */
void ot_grad_thresholded_relu(ot_grad *g, otter_node *n) {
    const char *above = op2(g, "Greater", "above", IN(0), scalar(g, IN(0), otter_node_attr_float(n, "alpha", 1.0f)));
    OT_G1(g, "Where", ot_grad_dx(g, 0), above, ot_grad_dy(g, 0), scalar(g, IN(0), 0.0f));
}

/* PRelu, Y = X * slope where X < 0 (slope broadcast to X, e.g. [C, 1, 1] per channel as PyTorch
 * exports it): dX = dY * slope there, dY elsewhere; dSlope = dY * X there, summed over the broadcast. */
void ot_grad_prelu(ot_grad *g, otter_node *n) {
    if (ot_grad_opset(g) < 7 && ot_grad_rank(g, IN(1)) == 1 && ot_grad_rank(g, IN(0)) >= 2)
        OT_GRAD_FAIL(g, OTTER_ERR_UNSUPPORTED, "PRelu before opset 7 (a 1-D per-channel slope) has no gradient rule");
    const char *dy = ot_grad_dy(g, 0), *zero = scalar(g, IN(0), 0.0f);
    const char *neg = op2(g, "Less", "negative", IN(0), zero);
    if (ot_grad_needs(g, 0)) OT_G1(g, "Where", ot_grad_dx(g, 0), neg, op2(g, "Mul", "dY_slope", dy, IN(1)), dy);
    if (ot_grad_needs(g, 1))
        to_input(g, n, 1,
                 OT_G1(g, "Where", ot_grad_tmp(g, "PreReduceGrad1"), neg, op2(g, "Mul", "dY_X", dy, IN(0)), zero));
}

/* Softplus, log(1 + exp(X)): dX = dY * sigmoid(X). */
void ot_grad_softplus(ot_grad *g, otter_node *n) { dy_times(g, op1(g, "Sigmoid", "sigmoid_X", IN(0))); }

/* Softsign, X / (1 + |X|): dX = dY / (1 + |X|)^2. */
void ot_grad_softsign(ot_grad *g, otter_node *n) {
    const char *d = op2(g, "Add", "one_abs_X", op1(g, "Abs", "abs_X", IN(0)), scalar(g, IN(0), 1.0f));
    dy_over(g, op2(g, "Mul", "squared", d, d));
}

/* Mish, X * tanh(softplus(X)): dX = dY * (t + X * sigmoid(X) * (1 - t^2)) with t = tanh(softplus(X)). */
void ot_grad_mish(ot_grad *g, otter_node *n) {
    const char *t = op1(g, "Tanh", "tanh_softplus", op1(g, "Softplus", "softplus_X", IN(0)));
    const char *sech2 = op2(g, "Sub", "sech2", scalar(g, IN(0), 1.0f), op2(g, "Mul", "t2", t, t));
    const char *xs = op2(g, "Mul", "X_sigmoid", IN(0), op1(g, "Sigmoid", "sigmoid_X", IN(0)));
    dy_times(g, op2(g, "Add", "dmish", t, op2(g, "Mul", "X_sigmoid_sech2", xs, sech2)));
}

/* Swish (opset 24) and com.microsoft QuickGelu, X * sigmoid(alpha * X) (alpha 1 and 1.702 by default):
 * dX = dY * s * (1 + alpha * X * (1 - s)), s = sigmoid(alpha * X). Returns that derivative, and s. */
static const char *swish_derivative(ot_grad *g, const char *x, float alpha, const char **sigmoid) {
    const char *alpha_x = op2(g, "Mul", "alpha_X", x, scalar(g, x, alpha));
    const char *s = op1(g, "Sigmoid", "sigmoid", alpha_x);
    const char *one = scalar(g, x, 1.0f);
    const char *inner =
        op2(g, "Add", "inner", one, op2(g, "Mul", "alpha_X_1_s", alpha_x, op2(g, "Sub", "1_s", one, s)));
    *sigmoid = s;
    return op2(g, "Mul", "dswish", s, inner);
}
/* One com.microsoft QuickGeluGrad node, as ORT's gradient builder emits for QuickGelu. X coming from a
 * training-mode BatchNormalization (efficientnet's BN + SiLU) is recomputed from the BN's input, which
 * its own gradient keeps anyway: X then dies in the forward pass (61 MB of efficientnet_b0's peak). */
void ot_grad_swish(ot_grad *g, otter_node *n) {
    float alpha = otter_node_attr_float(n, "alpha", ot_streq(n->op_type, "QuickGelu") ? 1.702f : 1.0f);
    otter_node *x = ot_grad_emit(g, "QuickGeluGrad", "com.microsoft", 2,
                                 (const char *[]){ot_grad_dy(g, 0), ot_grad_batchnorm_recompute(g, IN(0))}, 1,
                                 (const char *[]){ot_grad_dx(g, 0)});
    if (x && otter_node_set_attr_float(x, "alpha", alpha) != OTTER_OK) OT_GRAD_NOMEM(g);
}

/* SwiGLU (opset 28), Swish(A) * B: dA = dY * B * Swish'(A), dB = dY * Swish(A) = dY * A * s. */
void ot_grad_swiglu(ot_grad *g, otter_node *n) {
    const char *s, *dy = ot_grad_dy(g, 0);
    const char *dswish = swish_derivative(g, IN(0), otter_node_attr_float(n, "alpha", 1.0f), &s);
    if (ot_grad_needs(g, 0)) OT_G1(g, "Mul", ot_grad_dx(g, 0), op2(g, "Mul", "dY_B", dy, IN(1)), dswish);
    if (ot_grad_needs(g, 1)) OT_G1(g, "Mul", ot_grad_dx(g, 1), dy, op2(g, "Mul", "swish_A", IN(0), s));
}

static const char *x_squared(ot_grad *g, otter_node *n) { return op2(g, "Mul", "X2", IN(0), IN(0)); }
static const char *one_minus_x2(ot_grad *g, otter_node *n) {
    return op2(g, "Sub", "1_X2", scalar(g, IN(0), 1.0f), x_squared(g, n));
}

void ot_grad_sin(ot_grad *g, otter_node *n) { dy_times(g, op1(g, "Cos", "cos_X", IN(0))); }
void ot_grad_cos(ot_grad *g, otter_node *n) {
    OT_G1(g, "Neg", ot_grad_dx(g, 0), op2(g, "Mul", "dY_sin_X", ot_grad_dy(g, 0), op1(g, "Sin", "sin_X", IN(0))));
}
/* Tan: dX = dY * (1 + Y^2). */
void ot_grad_tan(ot_grad *g, otter_node *n) {
    dy_times(g, op2(g, "Add", "1_Y2", scalar(g, IN(0), 1.0f), op2(g, "Mul", "Y2", OUT(0), OUT(0))));
}
/* Asin: dX = dY / sqrt(1 - X^2); Acos: its negation. */
void ot_grad_asin(ot_grad *g, otter_node *n) { dy_over(g, op1(g, "Sqrt", "sqrt_1_X2", one_minus_x2(g, n))); }
void ot_grad_acos(ot_grad *g, otter_node *n) {
    const char *d = op2(g, "Div", "dY_over", ot_grad_dy(g, 0), op1(g, "Sqrt", "sqrt_1_X2", one_minus_x2(g, n)));
    OT_G1(g, "Neg", ot_grad_dx(g, 0), d);
}
/* Atan: dX = dY / (1 + X^2). */
void ot_grad_atan(ot_grad *g, otter_node *n) {
    dy_over(g, op2(g, "Add", "1_X2", scalar(g, IN(0), 1.0f), x_squared(g, n)));
}
void ot_grad_sinh(ot_grad *g, otter_node *n) { dy_times(g, op1(g, "Cosh", "cosh_X", IN(0))); }
void ot_grad_cosh(ot_grad *g, otter_node *n) { dy_times(g, op1(g, "Sinh", "sinh_X", IN(0))); }
/* Asinh: dX = dY / sqrt(X^2 + 1); Acosh: dY / sqrt(X^2 - 1); Atanh: dY / (1 - X^2). */
void ot_grad_asinh(ot_grad *g, otter_node *n) {
    dy_over(g, op1(g, "Sqrt", "sqrt_X2_1", op2(g, "Add", "X2_1", x_squared(g, n), scalar(g, IN(0), 1.0f))));
}
void ot_grad_acosh(ot_grad *g, otter_node *n) {
    dy_over(g, op1(g, "Sqrt", "sqrt_X2_1", op2(g, "Sub", "X2_1", x_squared(g, n), scalar(g, IN(0), 1.0f))));
}
void ot_grad_atanh(ot_grad *g, otter_node *n) { dy_over(g, one_minus_x2(g, n)); }
