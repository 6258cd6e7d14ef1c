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
        if (!otter_dtype_is_float(elem_type(g, b))) {
            otter_node *c = ot_grad_emit(g, "Cast", "", 1, &b, 1, (const char *[]){ot_grad_tmp(g, "B_cast")});
            if (c && otter_node_set_attr_int(c, "to", elem_type(g, IN(0))) != OTTER_OK)
                ot_grad_fail(g, OTTER_ERR_NOMEM, "out of memory");
            b = c ? c->outputs[0] : NULL;
        }
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
void ot_grad_relu(ot_grad *g, otter_node *n) { ms_grad_from_output(g, n, "ReluGrad"); }
void ot_grad_sigmoid(ot_grad *g, otter_node *n) { ms_grad_from_output(g, n, "SigmoidGrad"); }
void ot_grad_tanh(ot_grad *g, otter_node *n) { ms_grad_from_output(g, n, "TanhGrad"); }

/* com.microsoft Gelu / FastGelu: from the input. */
void ot_grad_gelu(ot_grad *g, otter_node *n) {
    const char *dx = ot_grad_dx(g, 0);
    ot_grad_emit(g, ot_streq(n->op_type, "Gelu") ? "GeluGrad" : "FastGeluGrad", "com.microsoft", 2,
                 (const char *[]){ot_grad_dy(g, 0), IN(0)}, 1, &dx);
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

/* Clip: dY passes where min <= X <= max (the subgradient 1 at the bounds, as PyTorch). */
void ot_grad_clip(ot_grad *g, otter_node *n) {
    const char *dy = ot_grad_dy(g, 0);
    const char *mask = NULL;
    bool attr_form = ot_grad_opset(g) < 11;
    const char *lo = NULL, *hi = NULL;
    if (attr_form) {
        if (otter_node_attr(n, "min")) lo = scalar(g, IN(0), otter_node_attr_float(n, "min", 0));
        if (otter_node_attr(n, "max")) hi = scalar(g, IN(0), otter_node_attr_float(n, "max", 0));
    } else {
        lo = n->n_inputs > 1 && IN(1)[0] ? IN(1) : NULL;
        hi = n->n_inputs > 2 && IN(2)[0] ? IN(2) : NULL;
    }
    if (lo) mask = OT_G1(g, "Not", ot_grad_tmp(g, "Masked_Min"), OT_G1(g, "Less", ot_grad_tmp(g, "below"), IN(0), lo));
    if (hi) {
        const char *m =
            OT_G1(g, "Not", ot_grad_tmp(g, "Masked_Max"), OT_G1(g, "Greater", ot_grad_tmp(g, "above"), IN(0), hi));
        mask = mask ? OT_G1(g, "And", ot_grad_tmp(g, "Masked_Min_Max"), mask, m) : m;
    }
    if (!mask) {
        OT_G1(g, "Identity", ot_grad_dx(g, 0), dy);
        return;
    }
    OT_G1(g, "Where", ot_grad_dx(g, 0), mask, dy, scalar(g, IN(0), 0.0f));
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

void ot_grad_cast(ot_grad *g, otter_node *n) {
    const char *dx = ot_grad_dx(g, 0), *dy = ot_grad_dy(g, 0);
    otter_node *c = ot_grad_emit(g, "Cast", "", 1, &dy, 1, &dx);
    if (c && otter_node_set_attr_int(c, "to", elem_type(g, IN(0))) != OTTER_OK)
        ot_grad_fail(g, OTTER_ERR_NOMEM, "out of memory");
}
