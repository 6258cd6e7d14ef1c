/* Gradient rules for the Reduce* operators and LpNormalization.
 *
 * Each rule brings dY (and Y where the derivative needs it) back to X's rank with the reduced axes
 * as 1s ("kept"), so one broadcasting product with an X-shaped factor gives dX. */
#include "autodiff/grad.h"
#include "core/core.h"

#define IN(i)  (n->inputs[i])
#define OUT(i) (n->outputs[i])

static void nomem(ot_grad *g) { ot_grad_fail(g, OTTER_ERR_NOMEM, "out of memory building gradients"); }

static otter_dtype elem_type(ot_grad *g, const char *name) {
    const otter_type *t = ot_grad_type(g, name);
    return t && t->has_elem_type ? t->elem_type : OTTER_DTYPE_FLOAT;
}

/* A scalar constant of X's dtype. */
static const char *scalar(ot_grad *g, const char *x, float v) {
    return ot_grad_const_f32(g, "const", v, elem_type(g, x));
}

/* The axes a reduction reduces: a tensor from opset 13 (where the emitted ReduceSum and Unsqueeze
 * take axes as an input), and the list itself when the forward node had it as an attribute (for
 * the forms that still take an attribute). given == false: every axis. */
typedef struct axes_ref {
    const char *tensor;
    const int64_t *ints;
    size_t n_ints;
    bool given;
} axes_ref;

static axes_ref axes_from_ints(ot_grad *g, size_t count, const int64_t *v) {
    axes_ref a = {.ints = v, .n_ints = count, .given = true};
    if (ot_grad_opset(g) >= 13) a.tensor = ot_grad_const_i64(g, "axes", count, v, false);
    return a;
}

/* Opset from which op takes its axes as input 1 rather than an attribute. */
static int axes_input_since(const char *op) { return ot_streq(op, "ReduceSum") || ot_streq(op, "Unsqueeze") ? 13 : 18; }

/* The forward node's axes; *noop: noop_with_empty_axes applies, so the node copied X. */
static axes_ref node_axes(ot_grad *g, otter_node *n, bool *noop) {
    bool axes_input = ot_grad_opset(g) >= axes_input_since(n->op_type);
    axes_ref a = {0};
    if (axes_input) {
        if (n->n_inputs > 1 && IN(1)[0]) a.tensor = IN(1), a.given = true;
    } else {
        const otter_attr *at = otter_node_attr(n, "axes");
        if (at) a = axes_from_ints(g, at->n_ints, at->ints);
    }
    *noop = axes_input && !a.given && otter_node_attr_int(n, "noop_with_empty_axes", 0);
    return a;
}

/* op(x) over the axes, written to out: a Reduce* (keepdims 1) or Unsqueeze in the opset's form. */
static const char *with_axes(ot_grad *g, const char *op, const char *x, const axes_ref *a, const char *out) {
    bool as_input = a->given && ot_grad_opset(g) >= axes_input_since(op);
    otter_node *m = ot_grad_emit(g, op, "", as_input ? 2 : 1, (const char *[]){x, a->tensor}, 1, &out);
    if (!m) return NULL;
    if (a->given && !as_input && otter_node_set_attr_ints(m, "axes", a->n_ints, a->ints) != OTTER_OK) nomem(g);
    if (!ot_streq(op, "Unsqueeze") && otter_node_set_attr_int(m, "keepdims", 1) != OTTER_OK) nomem(g);
    return out;
}

/* t, shaped like the node's output, with the reduced axes back as 1s so that it broadcasts against X. */
static const char *kept(ot_grad *g, otter_node *n, const axes_ref *a, const char *t, const char *hint) {
    if (otter_node_attr_int(n, "keepdims", 1) || !a->given) return t; /* a scalar broadcasts as it is */
    return with_axes(g, "Unsqueeze", t, a, ot_grad_tmp(g, hint));
}

/* The start every Reduce* rule shares. Returns false when the rule is done: the node was an
 * identity (noop_with_empty_axes), so dX = dY. */
static bool reduce_start(ot_grad *g, otter_node *n, axes_ref *a, const char **dy_kept) {
    bool noop;
    *a = node_axes(g, n, &noop);
    if (noop) {
        OT_G1(g, "Identity", ot_grad_dx(g, 0), ot_grad_dy(g, 0));
        return false;
    }
    *dy_kept = kept(g, n, a, ot_grad_dy(g, 0), "dY_kept");
    return true;
}

static const char *cast_to(ot_grad *g, const char *x, otter_dtype to, const char *hint) {
    const char *out = ot_grad_tmp(g, hint);
    otter_node *c = ot_grad_emit(g, "Cast", "", 1, &x, 1, &out);
    if (c && otter_node_set_attr_int(c, "to", to) != OTTER_OK) nomem(g);
    return c ? out : NULL;
}

/* ReduceSum / ReduceMean: dX = Expand(dY kept [/ count], shape(X)). */
void ot_grad_reduce(ot_grad *g, otter_node *n) {
    axes_ref a;
    const char *grad;
    if (!reduce_start(g, n, &a, &grad)) return;
    if (ot_streq(n->op_type, "ReduceMean")) {
        const char *ratio = OT_G1(g, "Div", ot_grad_tmp(g, "Scale"), OT_G1(g, "Size", ot_grad_tmp(g, "Sized_X"), IN(0)),
                                  OT_G1(g, "Size", ot_grad_tmp(g, "Sized_Grad"), OUT(0)));
        grad = OT_G1(g, "Div", ot_grad_tmp(g, "Scaled_Grad"), grad, cast_to(g, ratio, elem_type(g, IN(0)), "Scale_f"));
    }
    OT_G1(g, "Expand", ot_grad_dx(g, 0), grad, OT_G1(g, "Shape", ot_grad_tmp(g, "x_shape"), IN(0)));
}

/* ReduceMax / ReduceMin: dY goes to the elements equal to the result, split equally among ties
 * (as PyTorch's amax / amin): dX = dY * mask / count(mask). */
static void extremum_grad(ot_grad *g, otter_node *n, const axes_ref *a, const char *dy_kept, const char *y_kept) {
    const char *hit = OT_G1(g, "Equal", ot_grad_tmp(g, "is_extremum"), IN(0), y_kept);
    const char *mask = cast_to(g, hit, elem_type(g, IN(0)), "mask");
    const char *count = with_axes(g, "ReduceSum", mask, a, ot_grad_tmp(g, "ties"));
    const char *share = OT_G1(g, "Div", ot_grad_tmp(g, "share"), dy_kept, count);
    OT_G1(g, "Mul", ot_grad_dx(g, 0), mask, share);
}
void ot_grad_reduce_extremum(ot_grad *g, otter_node *n) {
    axes_ref a;
    const char *dy;
    if (!reduce_start(g, n, &a, &dy)) return;
    extremum_grad(g, n, &a, dy, kept(g, n, &a, OUT(0), "Y_kept"));
}

/* GlobalMaxPool: ReduceMax over the spatial axes, keeping them, so the same split among ties. */
void ot_grad_global_maxpool(ot_grad *g, otter_node *n) {
    int rank = ot_grad_rank(g, IN(0));
    if (rank < 3) OT_GRAD_FAIL(g, OTTER_ERR_UNSUPPORTED, "GlobalMaxPool gradient needs the rank of '%s'", IN(0));
    int64_t spatial[OTTER_MAX_RANK];
    for (int i = 2; i < rank; i++) spatial[i - 2] = i;
    axes_ref a = axes_from_ints(g, (size_t)(rank - 2), spatial);
    extremum_grad(g, n, &a, ot_grad_dy(g, 0), OUT(0));
}

/* ReduceProd: dX_i = dY * (product of the other elements), as PyTorch computes it: P / x_i on
 * lines without zeros; at the one zero of a line the product of its non-zero elements; 0
 * elsewhere on a line with zeros. The only divisor is a non-zero x. */
void ot_grad_reduce_prod(ot_grad *g, otter_node *n) {
    axes_ref a;
    const char *dy;
    if (!reduce_start(g, n, &a, &dy)) return;
    const char *x = IN(0);
    const char *is_zero = OT_G1(g, "Equal", ot_grad_tmp(g, "is_zero"), x, scalar(g, x, 0.0f));
    const char *zero_f = cast_to(g, is_zero, elem_type(g, x), "zero_f");
    const char *zeros = with_axes(g, "ReduceSum", zero_f, &a, ot_grad_tmp(g, "zeros_in_line"));
    const char *other_zeros = OT_G1(g, "Sub", ot_grad_tmp(g, "other_zeros"), zeros, zero_f);
    const char *safe = OT_G1(g, "Where", ot_grad_tmp(g, "nonzero_x"), is_zero, scalar(g, x, 1.0f), x);
    const char *prod = with_axes(g, "ReduceProd", safe, &a, ot_grad_tmp(g, "nonzero_prod"));
    const char *quot = OT_G1(g, "Div", ot_grad_tmp(g, "prod_over_x"), prod, safe);
    const char *others = OT_G1(g, "Where", ot_grad_tmp(g, "prod_of_others"), is_zero, prod, quot);
    const char *blocked = OT_G1(g, "Greater", ot_grad_tmp(g, "other_zero"), other_zeros, scalar(g, x, 0.5f));
    const char *factor = OT_G1(g, "Where", ot_grad_tmp(g, "factor"), blocked, scalar(g, x, 0.0f), others);
    OT_G1(g, "Mul", ot_grad_dx(g, 0), factor, dy);
}

/* ReduceLogSumExp: dX = dY * exp(X - Y) (the softmax over the reduced axes). */
void ot_grad_reduce_log_sum_exp(ot_grad *g, otter_node *n) {
    axes_ref a;
    const char *dy;
    if (!reduce_start(g, n, &a, &dy)) return;
    const char *y = kept(g, n, &a, OUT(0), "Y_kept");
    const char *soft =
        OT_G1(g, "Exp", ot_grad_tmp(g, "softmax"), OT_G1(g, "Sub", ot_grad_tmp(g, "X_minus_Y"), IN(0), y));
    OT_G1(g, "Mul", ot_grad_dx(g, 0), soft, dy);
}

/* ReduceLogSum: dX = dY / sum(X) = dY * exp(-Y). */
void ot_grad_reduce_log_sum(ot_grad *g, otter_node *n) {
    axes_ref a;
    const char *dy;
    if (!reduce_start(g, n, &a, &dy)) return;
    const char *y = kept(g, n, &a, OUT(0), "Y_kept");
    const char *inv = OT_G1(g, "Exp", ot_grad_tmp(g, "inv_sum"), OT_G1(g, "Neg", ot_grad_tmp(g, "neg_Y"), y));
    OT_G1(g, "Expand", ot_grad_dx(g, 0), OT_G1(g, "Mul", ot_grad_tmp(g, "dY_inv_sum"), dy, inv),
          OT_G1(g, "Shape", ot_grad_tmp(g, "x_shape"), IN(0)));
}

/* ReduceL1: dX = dY * sign(X). */
void ot_grad_reduce_l1(ot_grad *g, otter_node *n) {
    axes_ref a;
    const char *dy;
    if (!reduce_start(g, n, &a, &dy)) return;
    OT_G1(g, "Mul", ot_grad_dx(g, 0), OT_G1(g, "Sign", ot_grad_tmp(g, "sign"), IN(0)), dy);
}

/* 1 / t where t != 0, else 0 (a norm of zeros gets a zero gradient, as in PyTorch). */
static const char *safe_reciprocal(ot_grad *g, const char *t, const char *like) {
    const char *zero = scalar(g, like, 0.0f);
    const char *is_zero = OT_G1(g, "Equal", ot_grad_tmp(g, "norm_is_zero"), t, zero);
    const char *inv = OT_G1(g, "Reciprocal", ot_grad_tmp(g, "inv_norm"), t);
    return OT_G1(g, "Where", ot_grad_tmp(g, "safe_inv_norm"), is_zero, zero, inv);
}

/* ReduceL2: dX = dY * X / Y (0 where Y is 0). */
void ot_grad_reduce_l2(ot_grad *g, otter_node *n) {
    axes_ref a;
    const char *dy;
    if (!reduce_start(g, n, &a, &dy)) return;
    const char *inv = safe_reciprocal(g, kept(g, n, &a, OUT(0), "Y_kept"), IN(0));
    const char *scaled = OT_G1(g, "Mul", ot_grad_tmp(g, "dY_over_Y"), dy, inv);
    OT_G1(g, "Mul", ot_grad_dx(g, 0), IN(0), scaled);
}

/* ReduceSumSquare: dX = 2 X dY. */
void ot_grad_reduce_sum_square(ot_grad *g, otter_node *n) {
    axes_ref a;
    const char *dy;
    if (!reduce_start(g, n, &a, &dy)) return;
    const char *two_x = OT_G1(g, "Mul", ot_grad_tmp(g, "two_X"), IN(0), scalar(g, IN(0), 2.0f));
    OT_G1(g, "Mul", ot_grad_dx(g, 0), two_x, dy);
}

/* LpNormalization, Y = X / N with N = ||X||_p along axis (p 1 or 2; Y = 0 where N = 0):
 * dX = (dY - sum(dY * Y) * dN/dX) / N, where dN/dX is Y for p = 2 and sign(X) for p = 1. */
void ot_grad_lp_normalization(ot_grad *g, otter_node *n) {
    int64_t p = otter_node_attr_int(n, "p", 2), axis = otter_node_attr_int(n, "axis", -1);
    if (p != 1 && p != 2)
        OT_GRAD_FAIL(g, OTTER_ERR_UNSUPPORTED, "LpNormalization gradient needs p 1 or 2, not %lld", (long long)p);
    axes_ref a = axes_from_ints(g, 1, &axis);
    const char *x = IN(0), *y = OUT(0), *dy = ot_grad_dy(g, 0);
    const char *norm = with_axes(g, p == 2 ? "ReduceL2" : "ReduceL1", x, &a, ot_grad_tmp(g, "norm"));
    const char *dot =
        with_axes(g, "ReduceSum", OT_G1(g, "Mul", ot_grad_tmp(g, "dY_Y"), dy, y), &a, ot_grad_tmp(g, "sum_dY_Y"));
    const char *dnorm = p == 2 ? y : OT_G1(g, "Sign", ot_grad_tmp(g, "sign"), x);
    const char *radial = OT_G1(g, "Mul", ot_grad_tmp(g, "radial"), dot, dnorm);
    const char *tangent = OT_G1(g, "Sub", ot_grad_tmp(g, "tangent"), dy, radial);
    OT_G1(g, "Mul", ot_grad_dx(g, 0), tangent, safe_reciprocal(g, norm, x));
}

/* MeanVarianceNormalization: Y = (X - mean) / (std + 1e-9) over `axes`, a LayerNormalization
 * without scale: dX = (dY - mean(dY) - Y * mean(dY * Y)) / (std + 1e-9). */
void ot_grad_mvn(ot_grad *g, otter_node *n) {
    static const int64_t default_axes[] = {0, 2, 3};
    const otter_attr *at = otter_node_attr(n, "axes");
    axes_ref a = at ? axes_from_ints(g, at->n_ints, at->ints) : axes_from_ints(g, 3, default_axes);
    const char *x = IN(0), *y = OUT(0), *dy = ot_grad_dy(g, 0);
    const char *centered =
        OT_G1(g, "Sub", ot_grad_tmp(g, "centered"), x, with_axes(g, "ReduceMean", x, &a, ot_grad_tmp(g, "mean")));
    const char *var = with_axes(g, "ReduceMean", OT_G1(g, "Mul", ot_grad_tmp(g, "square"), centered, centered), &a,
                                ot_grad_tmp(g, "variance"));
    const char *denom =
        OT_G1(g, "Add", ot_grad_tmp(g, "std_eps"), OT_G1(g, "Sqrt", ot_grad_tmp(g, "std"), var), scalar(g, x, 1e-9f));
    const char *mean_dy = with_axes(g, "ReduceMean", dy, &a, ot_grad_tmp(g, "mean_dY"));
    const char *mean_dy_y =
        with_axes(g, "ReduceMean", OT_G1(g, "Mul", ot_grad_tmp(g, "dY_Y"), dy, y), &a, ot_grad_tmp(g, "mean_dY_Y"));
    const char *num =
        OT_G1(g, "Sub", ot_grad_tmp(g, "numerator"), OT_G1(g, "Sub", ot_grad_tmp(g, "dY_centered"), dy, mean_dy),
              OT_G1(g, "Mul", ot_grad_tmp(g, "Y_mean_dY_Y"), y, mean_dy_y));
    OT_G1(g, "Div", ot_grad_dx(g, 0), num, denom);
}
