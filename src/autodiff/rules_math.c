/* Gradient rules for math and signal operators exporters emit beyond the common families.
 * Products whose derivative would divide by X (CumProd, Det) and the linear transforms (DFT, STFT) go
 * through com.otter gradient kernels (CumProdGrad, DetGrad, DFTGrad, STFTGrad: ONNX Runtime has none);
 * LpPool, GlobalLpPool, CastLike, Mod (fmod), MaxUnpool, CenterCropPad and Compress are ONNX
 * compositions. */
#include "autodiff/grad.h"

#define IN(i)  (n->inputs[i])
#define OUT(i) (n->outputs[i])

static otter_dtype elem_type(ot_grad *g, const char *name) {
    const otter_type *t = ot_grad_type(g, name);
    return t && t->has_elem_type ? t->elem_type : OTTER_DTYPE_FLOAT;
}

static const char *scalar(ot_grad *g, const char *like, float v) {
    return ot_grad_const_f32(g, "const", v, elem_type(g, like));
}

static void copy_int(ot_grad *g, otter_node *dst, const otter_node *src, const char *name) {
    const otter_attr *a = otter_node_attr(src, name);
    if (dst && a && otter_node_set_attr_int(dst, name, a->i) != OTTER_OK)
        ot_grad_fail(g, OTTER_ERR_NOMEM, "out of memory building gradients");
}

/* CumProd: com.otter CumProdGrad (runtime/ops/reduce.c) runs the product scan backwards, exact where
 * the line holds zeros. */
void ot_grad_cumprod(ot_grad *g, otter_node *n) {
    const char *dx = ot_grad_dx(g, 0);
    otter_node *m =
        ot_grad_emit(g, "CumProdGrad", "com.otter", 3, (const char *[]){ot_grad_dy(g, 0), IN(0), IN(1)}, 1, &dx);
    copy_int(g, m, n, "exclusive");
    copy_int(g, m, n, "reverse");
}

/* Det: dX = dY * cofactor(X), from com.otter DetGrad (runtime/ops/extra.c), which takes the adjugate
 * when X is singular. */
void ot_grad_det(ot_grad *g, otter_node *n) {
    const char *dx = ot_grad_dx(g, 0);
    ot_grad_emit(g, "DetGrad", "com.otter", 2, (const char *[]){ot_grad_dy(g, 0), IN(0)}, 1, &dx);
}

/* The pool's order p: a float attribute in opset 1, an int from opset 2; 2 when unset. */
static double lp_order(const otter_node *n) {
    const otter_attr *a = otter_node_attr(n, "p");
    if (!a) return 2;
    return a->type == OTTER_ATTR_FLOAT ? a->f : (double)a->i;
}

/* Y = (sum over a window of |X|^p)^(1/p), so dY reaches each X in the window as
 * dY Y^(1-p) |X|^(p-1) sign(X). Returns dY Y^(1-p), 0 where Y is 0 (an all-zero window, where the
 * derivative is undefined for p > 1 and PyTorch's is NaN). */
static const char *lp_scaled_dy(ot_grad *g, otter_node *n, double p) {
    const char *dy = ot_grad_dy(g, 0), *y = OUT(0);
    if (p == 1) return dy;
    const char *y_pow = OT_G1(g, "Pow", ot_grad_tmp(g, "Y_pow"), y, scalar(g, y, (float)(p - 1)));
    const char *ratio = OT_G1(g, "Div", ot_grad_tmp(g, "dY_over_Y_pow"), dy, y_pow);
    const char *empty = OT_G1(g, "Equal", ot_grad_tmp(g, "zero_norm"), y, scalar(g, y, 0.0f));
    return OT_G1(g, "Where", ot_grad_tmp(g, "scaled_dY"), empty, scalar(g, y, 0.0f), ratio);
}

/* d|X|^p / dX / p = |X|^(p-1) sign(X) times `t` (broadcast to X), written to `out`. */
static void times_lp_slope(ot_grad *g, const char *x, double p, const char *t, const char *out) {
    const char *slope;
    if (p == 1)
        slope = OT_G1(g, "Sign", ot_grad_tmp(g, "sign"), x);
    else if (p == 2)
        slope = x;
    else
        slope = OT_G1(g, "Mul", ot_grad_tmp(g, "slope"), OT_G1(g, "Sign", ot_grad_tmp(g, "sign"), x),
                      OT_G1(g, "Pow", ot_grad_tmp(g, "abs_pow"), OT_G1(g, "Abs", ot_grad_tmp(g, "abs"), x),
                            scalar(g, x, (float)(p - 1))));
    OT_G1(g, "Mul", out, t, slope);
}

/* The window attributes a pool shares with AveragePool (LpPool's p stays behind). */
static void copy_pool_geometry(ot_grad *g, otter_node *dst, const otter_node *src) {
    static const char *const lists[] = {"kernel_shape", "strides", "pads", "dilations"};
    if (!dst) return;
    otter_status s = OTTER_OK;
    for (size_t i = 0; i < sizeof lists / sizeof *lists && s == OTTER_OK; i++) {
        const otter_attr *a = otter_node_attr(src, lists[i]);
        if (a) s = otter_node_set_attr_ints(dst, lists[i], a->n_ints, a->ints);
    }
    if (s == OTTER_OK && otter_node_attr(src, "auto_pad"))
        s = otter_node_set_attr_string(dst, "auto_pad", otter_node_attr_string(src, "auto_pad", "NOTSET"));
    copy_int(g, dst, src, "ceil_mode");
    if (s != OTTER_OK) ot_grad_fail(g, OTTER_ERR_NOMEM, "out of memory building gradients");
}

/* LpPool: the scaled dY is summed back over each window by AveragePoolGrad on dY times the count
 * the average divides by: the kernel volume (count_include_pad 1) when every window lies inside
 * the padded input, else (ceil_mode, whose last windows may stop short) the windows' own counts of
 * X elements, an LpPool with p = 1 of ones (count_include_pad 0 then divides by the same counts). */
void ot_grad_lppool(ot_grad *g, otter_node *n) {
    double p = lp_order(n);
    const char *x = IN(0), *t = lp_scaled_dy(g, n, p);
    const otter_attr *k = otter_node_attr(n, "kernel_shape");
    if (!k) OT_GRAD_FAIL(g, OTTER_ERR_INVALID, "LpPool gradient: attribute 'kernel_shape' is missing");
    bool clipped = otter_node_attr_int(n, "ceil_mode", 0) != 0;
    const char *count;
    if (!clipped) {
        int64_t kvol = 1;
        for (size_t i = 0; i < k->n_ints; i++) kvol *= k->ints[i];
        count = scalar(g, x, (float)kvol);
    } else {
        const char *ones = OT_G1(g, "Expand", ot_grad_tmp(g, "ones"), scalar(g, x, 1.0f),
                                 OT_G1(g, "Shape", ot_grad_tmp(g, "x_shape"), x));
        count = ot_grad_tmp(g, "window_count");
        otter_node *c = ot_grad_emit(g, "LpPool", "", 1, &ones, 1, &count);
        copy_pool_geometry(g, c, n);
        if (c && otter_node_set_attr_int(c, "p", 1) != OTTER_OK)
            ot_grad_fail(g, OTTER_ERR_NOMEM, "out of memory building gradients");
    }
    const char *summed = OT_G1(g, "Mul", ot_grad_tmp(g, "scaled_dY_count"), t, count);
    const char *spread = ot_grad_tmp(g, "window_sum");
    otter_node *m = ot_grad_emit(g, "AveragePoolGrad", "", 1, &summed, 1, &spread);
    copy_pool_geometry(g, m, n);
    if (m && otter_node_set_attr_int(m, "count_include_pad", !clipped) != OTTER_OK)
        ot_grad_fail(g, OTTER_ERR_NOMEM, "out of memory building gradients");
    ot_grad_declare_like(g, spread, x);
    times_lp_slope(g, x, p, spread, ot_grad_dx(g, 0));
}

/* GlobalLpPool: one window per plane, so the scaled dY ([N, C, 1, ...]) broadcasts over it. */
void ot_grad_global_lppool(ot_grad *g, otter_node *n) {
    double p = lp_order(n);
    times_lp_slope(g, IN(0), p, lp_scaled_dy(g, n, p), ot_grad_dx(g, 0));
}

/* Mod with fmod = 1 (the float form: Y = A - B trunc(A / B)): dA = dY, dB = -dY trunc(A / B), as
 * PyTorch's fmod backward; each reduced to its input's shape. Integer Mod has no gradient. */
void ot_grad_mod(ot_grad *g, otter_node *n) {
    if (!otter_node_attr_int(n, "fmod", 0))
        OT_GRAD_FAIL(g, OTTER_ERR_UNSUPPORTED, "Mod gradient needs fmod = 1 (float inputs)");
    const char *dy = ot_grad_dy(g, 0), *out;
    if ((out = ot_grad_dx(g, 0))) ot_grad_unbroadcast(g, dy, IN(0), OUT(0), out);
    if (!(out = ot_grad_dx(g, 1))) return;
    const char *q = OT_G1(g, "Div", ot_grad_tmp(g, "A_over_B"), IN(0), IN(1));
    const char *trunc =
        OT_G1(g, "Mul", ot_grad_tmp(g, "trunc"), OT_G1(g, "Sign", ot_grad_tmp(g, "sign"), q),
              OT_G1(g, "Floor", ot_grad_tmp(g, "floor_abs"), OT_G1(g, "Abs", ot_grad_tmp(g, "abs"), q)));
    const char *db =
        OT_G1(g, "Neg", ot_grad_tmp(g, "PreReduceGrad1"), OT_G1(g, "Mul", ot_grad_tmp(g, "dY_trunc"), dy, trunc));
    ot_grad_unbroadcast(g, db, IN(1), OUT(0), out);
}

static const char *flat(ot_grad *g, const char *t) {
    static const int64_t minus_one = -1;
    return OT_G1(g, "Reshape", ot_grad_tmp(g, "flat"), t, ot_grad_const_i64(g, "flat_shape", 1, &minus_one, false));
}

/* MaxUnpool: X's elements went to the flat positions Indices names in Y's default shape ([N, C, (in - 1)
 * stride + kernel - pads]), which a larger output_shape holds at its start; dX reads them back. */
void ot_grad_maxunpool(ot_grad *g, otter_node *n) {
    const char *dy = ot_grad_dy(g, 0);
    if (n->n_inputs > 2 && IN(2)[0]) {
        if (ot_grad_opset(g) < 10)
            OT_GRAD_FAIL(g, OTTER_ERR_UNSUPPORTED, "MaxUnpool gradient with output_shape needs opset 10 (Slice)");
        const otter_attr *k = otter_node_attr(n, "kernel_shape"), *st = otter_node_attr(n, "strides"),
                         *pads = otter_node_attr(n, "pads");
        if (!k) OT_GRAD_FAIL(g, OTTER_ERR_INVALID, "MaxUnpool gradient: attribute 'kernel_shape' is missing");
        size_t sp = k->n_ints;
        int64_t strides[OTTER_MAX_RANK], extra[OTTER_MAX_RANK], two = 2, end = INT64_MAX;
        for (size_t i = 0; i < sp; i++) {
            strides[i] = st && i < st->n_ints ? st->ints[i] : 1;
            extra[i] = k->ints[i] - strides[i] - (pads ? pads->ints[i] + pads->ints[sp + i] : 0);
        }
        const char *x_shape = OT_G1(g, "Shape", ot_grad_tmp(g, "x_shape"), IN(0));
        const char *spatial =
            OT_G1(g, "Slice", ot_grad_tmp(g, "x_spatial"), x_shape, ot_grad_const_i64(g, "2", 1, &two, false),
                  ot_grad_const_i64(g, "end", 1, &end, false));
        const char *unpooled = OT_G1(
            g, "Add", ot_grad_tmp(g, "default_spatial"),
            OT_G1(g, "Mul", ot_grad_tmp(g, "strided"), spatial, ot_grad_const_i64(g, "strides", sp, strides, false)),
            ot_grad_const_i64(g, "k_minus_s_pads", sp, extra, false));
        const char *ends = ot_grad_tmp(g, "default_shape");
        otter_node *c = ot_grad_emit(g, "Concat", "", 2,
                                     (const char *[]){OT_G1(g, "Slice", ot_grad_tmp(g, "x_nc"), x_shape,
                                                            ot_grad_const_i64(g, "0", 1, (const int64_t[]){0}, false),
                                                            ot_grad_const_i64(g, "2", 1, &two, false)),
                                                      unpooled},
                                     1, &ends);
        if (c && otter_node_set_attr_int(c, "axis", 0) != OTTER_OK)
            ot_grad_fail(g, OTTER_ERR_NOMEM, "out of memory building gradients");
        const char *starts = OT_G1(g, "Sub", ot_grad_tmp(g, "zeros"), ends, ends);
        dy = OT_G1(g, "Slice", ot_grad_tmp(g, "dY_default"), dy, starts, ends);
    }
    OT_G1(g, "Gather", ot_grad_dx(g, 0), flat(g, dy), IN(1));
}

/* CenterCropPad: cropping and zero padding centred the same way are each other's adjoint, so dX is dY
 * centre-cropped / padded back to X's extent on the same axes. */
void ot_grad_center_crop_pad(ot_grad *g, otter_node *n) {
    const char *shape = OT_G1(g, "Shape", ot_grad_tmp(g, "x_shape"), IN(0));
    const otter_attr *axes = otter_node_attr(n, "axes");
    if (axes)
        shape = OT_G1(g, "Gather", ot_grad_tmp(g, "x_extent"), shape,
                      ot_grad_const_i64(g, "axes", axes->n_ints, axes->ints, false));
    const char *dx = ot_grad_dx(g, 0);
    otter_node *m = ot_grad_emit(g, "CenterCropPad", "", 2, (const char *[]){ot_grad_dy(g, 0), shape}, 1, &dx);
    if (m && axes && otter_node_set_attr_ints(m, "axes", axes->n_ints, axes->ints) != OTTER_OK)
        ot_grad_fail(g, OTTER_ERR_NOMEM, "out of memory building gradients");
}

/* Compress: dY goes back to the positions the condition kept, zeros elsewhere: a ScatterElements
 * (Scatter before opset 11) into zeros shaped like X, along `axis`, or over X flattened without one. */
void ot_grad_compress(ot_grad *g, otter_node *n) {
    const char *scatter = ot_grad_opset(g) >= 11 ? "ScatterElements" : "Scatter";
    const otter_attr *axis = otter_node_attr(n, "axis");
    const char *dy = ot_grad_dy(g, 0), *dx = ot_grad_dx(g, 0), *x = IN(0);
    const char *kept = flat(g, OT_G1(g, "NonZero", ot_grad_tmp(g, "kept"), IN(1)));
    if (!axis) {
        const char *zeros = ot_grad_zeros_like(g, flat(g, x), x, NULL);
        const char *spread = ot_grad_tmp(g, "dX_flat");
        ot_grad_emit(g, scatter, "", 3, (const char *[]){zeros, kept, dy}, 1, &spread);
        OT_G1(g, "Reshape", dx, spread, OT_G1(g, "Shape", ot_grad_tmp(g, "x_shape"), x));
        return;
    }
    int rank = ot_grad_rank(g, x);
    int64_t ax = axis->i;
    if (rank < 0) OT_GRAD_FAIL(g, OTTER_ERR_UNSUPPORTED, "Compress gradient needs the rank of '%s'", x);
    if (ax < 0) ax += rank;
    /* The kept positions as [1, .., K, .., 1] (K on `axis`), expanded to dY's shape. */
    int64_t view[OTTER_MAX_RANK];
    for (int i = 0; i < rank; i++) view[i] = i == ax ? -1 : 1;
    const char *idx = OT_G1(g, "Expand", ot_grad_tmp(g, "kept_idx"),
                            OT_G1(g, "Reshape", ot_grad_tmp(g, "kept_view"), kept,
                                  ot_grad_const_i64(g, "kept_view_shape", (size_t)rank, view, false)),
                            OT_G1(g, "Shape", ot_grad_tmp(g, "dy_shape"), dy));
    otter_node *m =
        ot_grad_emit(g, scatter, "", 3, (const char *[]){ot_grad_zeros_like(g, x, NULL, NULL), idx, dy}, 1, &dx);
    if (m && otter_node_set_attr_int(m, "axis", ax) != OTTER_OK)
        ot_grad_fail(g, OTTER_ERR_NOMEM, "out of memory building gradients");
}

/* DFT: linear in X, so dX is the adjoint transform of dY: com.otter DFTGrad (runtime/ops/extra.c) with
 * DFT's inputs and attributes. DFT-20's axis goes in as input 3 (-2 when the node leaves it out). */
void ot_grad_dft(ot_grad *g, otter_node *n) {
    const char *length = n->n_inputs > 1 ? IN(1) : "", *axis = "";
    if (ot_grad_opset(g) >= 20) {
        static const int64_t last_signal_axis = -2;
        axis = n->n_inputs > 2 && IN(2)[0] ? IN(2) : ot_grad_const_i64(g, "axis", 1, &last_signal_axis, true);
    }
    const char *dx = ot_grad_dx(g, 0);
    otter_node *m = ot_grad_emit(g, "DFTGrad", "com.otter", axis[0] ? 4 : 2 + (length[0] != 0),
                                 (const char *[]){ot_grad_dy(g, 0), IN(0), length, axis}, 1, &dx);
    ot_grad_copy_attrs(g, m, n);
}

/* STFT: linear in the signal and in the window; com.otter STFTGrad (runtime/ops/extra.c) gives both. */
void ot_grad_stft(ot_grad *g, otter_node *n) {
    const char *window = n->n_inputs > 2 ? IN(2) : "", *length = n->n_inputs > 3 ? IN(3) : "";
    const char *outs[2] = {ot_grad_dx(g, 0), window[0] ? ot_grad_dx(g, 2) : NULL};
    if (!outs[0]) outs[0] = ot_grad_tmp(g, "unused_grad");
    otter_node *m =
        ot_grad_emit(g, "STFTGrad", "com.otter", length[0] ? 5 : 4,
                     (const char *[]){ot_grad_dy(g, 0), IN(0), window, IN(1), length}, outs[1] ? 2 : 1, outs);
    ot_grad_copy_attrs(g, m, n);
}
