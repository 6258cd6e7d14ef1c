/* Gradient rules for matrix products, convolution, pooling, normalization, dropout, softmax and
 * losses. Where ONNX Runtime's training runtime has a gradient kernel (ConvGrad, MaxPoolGrad,
 * SoftmaxCrossEntropyLossGrad, ...) the rule emits it, so ORT runs the result. */
#include <string.h>

#include "autodiff/grad.h"
#include "core/core.h"

#define IN(i)  (n->inputs[i])
#define OUT(i) (n->outputs[i])

static void nomem(ot_grad *g) { ot_grad_fail(g, OTTER_ERR_NOMEM, "out of memory building gradients"); }

static void set_int(ot_grad *g, otter_node *x, const char *name, int64_t v) {
    if (x && otter_node_set_attr_int(x, name, v) != OTTER_OK) nomem(g);
}
static void set_float(ot_grad *g, otter_node *x, const char *name, float v) {
    if (x && otter_node_set_attr_float(x, name, v) != OTTER_OK) nomem(g);
}

static otter_dtype elem_type(ot_grad *g, const char *name) {
    const otter_type *t = ot_grad_type(g, name);
    return t && t->has_elem_type ? t->elem_type : OTTER_DTYPE_FLOAT;
}

/* ---- Gemm and MatMul -------------------------------------------------------------------- */

/* Y = alpha * op(A) op(B) + beta * C */
void ot_grad_gemm(ot_grad *g, otter_node *n) {
    const char *dy = ot_grad_dy(g, 0);
    int64_t ta = otter_node_attr_int(n, "transA", 0), tb = otter_node_attr_int(n, "transB", 0);
    float alpha = otter_node_attr_float(n, "alpha", 1.0f), beta = otter_node_attr_float(n, "beta", 1.0f);
    const char *dA = ot_grad_dx(g, 0);
    if (dA) {
        otter_node *x = ta ? ot_grad_emit(g, "Gemm", "", 2, (const char *[]){IN(1), dy}, 1, &dA)
                           : ot_grad_emit(g, "Gemm", "", 2, (const char *[]){dy, IN(1)}, 1, &dA);
        set_int(g, x, "transA", ta ? tb : 0);
        set_int(g, x, "transB", ta ? 1 : !tb);
        set_float(g, x, "alpha", alpha);
        set_float(g, x, "beta", 0.0f);
    }
    const char *dB = ot_grad_dx(g, 1);
    if (dB) {
        otter_node *x = tb ? ot_grad_emit(g, "Gemm", "", 2, (const char *[]){dy, IN(0)}, 1, &dB)
                           : ot_grad_emit(g, "Gemm", "", 2, (const char *[]){IN(0), dy}, 1, &dB);
        set_int(g, x, "transA", tb ? 1 : !ta);
        set_int(g, x, "transB", tb ? ta : 0);
        set_float(g, x, "alpha", alpha);
        set_float(g, x, "beta", 0.0f);
    }
    if (ot_grad_needs(g, 2)) {
        const char *src = dy;
        if (beta != 1.0f)
            src = OT_G1(g, "Mul", ot_grad_tmp(g, "beta_dY"), dy,
                        ot_grad_const_f32(g, "beta", beta, elem_type(g, OUT(0))));
        ot_grad_unbroadcast(g, src, IN(2), OUT(0), ot_grad_dx(g, 2));
    }
}

/* Sum a batched product over the batch axes the operand was broadcast along: the operand x has
 * rank rx (>= 2), the product p has rank rp with the same last two dims as x. */
static void reduce_batch(ot_grad *g, const char *p, const char *x, const char *y, const char *out) {
    const otter_type *tx = ot_grad_type(g, x), *ty = ot_grad_type(g, y);
    int rx = tx ? tx->rank : -1, ry = ty ? ty->rank : -1;
    if (rx < 2 || ry < 2) {
        ot_grad_fail(g, OTTER_ERR_UNSUPPORTED, "MatMul gradient needs operands of known rank >= 2");
        return;
    }
    int64_t axes[OTTER_MAX_RANK];
    size_t k = 0;
    int off = ry - rx;
    for (int i = 0; i < off; i++) axes[k++] = i;
    bool keep = false;
    for (int i = 0; i < rx - 2; i++)
        if (tx->dims[i].value == 1 && ty->dims[i + off].value != 1) {
            axes[k++] = i + off;
            keep = true;
        }
    if (k == 0) {
        OT_G1(g, "Identity", out, p);
        return;
    }
    const char *sum = keep && off ? ot_grad_tmp(g, "reduced") : out;
    ot_grad_reduce_sum(g, p, k, axes, keep, sum);
    if (keep && off) OT_G1(g, "Reshape", out, sum, OT_G1(g, "Shape", ot_grad_tmp(g, "shape"), x));
}

/* alpha * op(a) op(b) as one com.microsoft FusedMatMul (alpha from n, 1 when n has none): the
 * transposes are read by the product, never copied into a tensor of their own. */
static const char *fused_product(ot_grad *g, otter_node *n, const char *hint, const char *a, const char *b, bool ta,
                                 bool tb) {
    const char *out = ot_grad_tmp(g, hint);
    otter_node *x = ot_grad_emit(g, "FusedMatMul", "com.microsoft", 2, (const char *[]){a, b}, 1, &out);
    set_int(g, x, "transA", ta);
    set_int(g, x, "transB", tb);
    set_float(g, x, "alpha", otter_node_attr_float(n, "alpha", 1.0f));
    return x ? out : NULL;
}

/* dB of a Linear layer's product (A [..., K] x weight B [K, N]): A^T dY over every row of the batch
 * as one Gemm on the flattened operands. The batched form (a product [..., K, N] per batch row,
 * summed afterwards) held a [batch, K, N] tensor and a transposed copy of A: 50 of the 541 MB a
 * 4-layer d=256 encoder's training step peaked at (batch 32, 128 tokens). */
static void linear_weight_grad(ot_grad *g, const char *a, const char *dy, int64_t K, int64_t N, const char *db) {
    const char *rows_a = OT_G1(g, "Reshape", ot_grad_tmp(g, "rows"), a,
                               ot_grad_const_i64(g, "rows_shape", 2, (const int64_t[]){-1, K}, false));
    const char *rows_dy = OT_G1(g, "Reshape", ot_grad_tmp(g, "rows"), dy,
                                ot_grad_const_i64(g, "rows_shape", 2, (const int64_t[]){-1, N}, false));
    otter_node *x = ot_grad_emit(g, "Gemm", "", 2, (const char *[]){rows_a, rows_dy}, 1, &db);
    set_int(g, x, "transA", 1);
}

void ot_grad_matmul(ot_grad *g, otter_node *n) {
    const char *dy = ot_grad_dy(g, 0);
    int ra = ot_grad_rank(g, IN(0)), rb = ot_grad_rank(g, IN(1));
    if (ra < 2 || rb < 2) {
        ot_grad_fail(g, OTTER_ERR_UNSUPPORTED, "MatMul gradient supports operands of known rank >= 2 (got %d and %d)",
                     ra, rb);
        return;
    }
    if (ot_grad_needs(g, 0)) /* dA = dY B^T */
        reduce_batch(g, fused_product(g, n, "dA_full", dy, IN(1), false, true), IN(0), OUT(0), ot_grad_dx(g, 0));
    if (ot_grad_needs(g, 1)) { /* dB = A^T dY */
        const otter_type *tb = ot_grad_type(g, IN(1));
        const int64_t K = tb->dims[0].value, N = tb->dims[1].value;
        if (rb == 2 && ra > 2 && K > 0 && N > 0)
            linear_weight_grad(g, IN(0), dy, K, N, ot_grad_dx(g, 1));
        else
            reduce_batch(g, fused_product(g, n, "dB_full", IN(0), dy, true, false), IN(1), OUT(0), ot_grad_dx(g, 1));
    }
}

/* com.microsoft FusedMatMul: Y = alpha * op(A) op(B), op transposing the last two axes where
 * transA / transB say. The gradients are FusedMatMuls too (alpha and the transposes folded in),
 * summed over the batch axes the operand was broadcast along. */
void ot_grad_fused_matmul(ot_grad *g, otter_node *n) {
    if (otter_node_attr_int(n, "transBatchA", 0) || otter_node_attr_int(n, "transBatchB", 0))
        OT_GRAD_FAIL(g, OTTER_ERR_UNSUPPORTED, "FusedMatMul gradient does not support transBatchA / transBatchB");
    bool ta = otter_node_attr_int(n, "transA", 0) != 0, tb = otter_node_attr_int(n, "transB", 0) != 0;
    const char *dy = ot_grad_dy(g, 0), *a = IN(0), *b = IN(1);
    if (ot_grad_needs(g, 0)) { /* d op(A) = alpha dY op(B)^T, transposed back when transA */
        const char *p =
            ta ? fused_product(g, n, "dA_full", b, dy, tb, true) : fused_product(g, n, "dA_full", dy, b, false, !tb);
        reduce_batch(g, p, a, OUT(0), ot_grad_dx(g, 0));
    }
    if (ot_grad_needs(g, 1)) { /* d op(B) = alpha op(A)^T dY, transposed back when transB */
        const char *p =
            tb ? fused_product(g, n, "dB_full", dy, a, true, ta) : fused_product(g, n, "dB_full", a, dy, !ta, false);
        reduce_batch(g, p, b, OUT(0), ot_grad_dx(g, 1));
    }
}

/* ---- convolution and pooling ------------------------------------------------------------- */

void ot_grad_conv(ot_grad *g, otter_node *n) {
    const char *outs[3];
    for (size_t i = 0; i < 3; i++) outs[i] = i < n->n_inputs ? ot_grad_dx(g, i) : NULL;
    for (size_t i = 0; i < 3; i++)
        if (!outs[i]) outs[i] = "";
    size_t n_out = n->n_inputs > 2 ? 3 : 2;
    otter_node *x =
        ot_grad_emit(g, "ConvGrad", "com.microsoft", 3, (const char *[]){ot_grad_dy(g, 0), IN(0), IN(1)}, n_out, outs);
    ot_grad_copy_attrs(g, x, n);
}

static const char *reshape_flat(ot_grad *g, const char *x) {
    int64_t minus_one = -1;
    return OT_G1(g, "Reshape", ot_grad_tmp(g, "flat"), x, ot_grad_const_i64(g, "minus_one", 1, &minus_one, false));
}

/* Whether pooling windows can share input elements (a kernel extent beyond the stride). */
static bool windows_overlap(const otter_node *n) {
    const otter_attr *k = otter_node_attr(n, "kernel_shape"), *st = otter_node_attr(n, "strides"),
                     *d = otter_node_attr(n, "dilations");
    for (size_t i = 0; k && i < k->n_ints; i++) {
        int64_t extent = (k->ints[i] - 1) * (d && i < d->n_ints ? d->ints[i] : 1) + 1;
        if (extent > (st && i < st->n_ints ? st->ints[i] : 1)) return true;
    }
    return false;
}

/* MaxPool: scatter dY to the argmax positions: the Indices output counts over the flattened X, so
 * dX = Reshape(ScatterElements(zeros[numel(X)], flat(indices), flat(dY), add), shape(X)). Standard
 * ops keep the training model valid for onnx.checker and runnable by ORT. Overlapping windows need
 * ScatterElements' reduction (opset 16); below that, ORT's MaxPoolGrad (default domain, as ORT
 * registers it) does the job. */
void ot_grad_maxpool(ot_grad *g, otter_node *n) {
    const char *indices = ot_grad_forward_output(g, n, 1, "indices");
    const char *dx = ot_grad_dx(g, 0), *dy = ot_grad_dy(g, 0);
    bool reduction = ot_grad_opset(g) >= 16, overlap = windows_overlap(n);
    if (otter_node_attr_int(n, "storage_order", 0) != 0 || (overlap && !reduction)) {
        otter_node *x = ot_grad_emit(g, "MaxPoolGrad", "", 2, (const char *[]){dy, indices}, 1, &dx);
        ot_grad_copy_attrs(g, x, n);
        ot_grad_declare_like(g, dx, IN(0));
        return;
    }
    const char *shape = OT_G1(g, "Shape", ot_grad_tmp(g, "x_shape"), IN(0));
    const char *zeros = ot_grad_tmp(g, "zeros");
    otter_node *c = ot_grad_emit(g, "ConstantOfShape", "", 1, &shape, 1, &zeros);
    otter_tensor *zero;
    int64_t one = 1;
    if (c && (otter_tensor_create(&zero, NULL, elem_type(g, IN(0)), 1, &one) != OTTER_OK ||
              otter_node_set_attr_tensor(c, "value", zero) != OTTER_OK))
        OT_GRAD_NOMEM(g);
    const char *scattered = ot_grad_tmp(g, "scattered");
    otter_node *sc = ot_grad_emit(
        g, "ScatterElements", "", 3,
        (const char *[]){reshape_flat(g, zeros), reshape_flat(g, indices), reshape_flat(g, dy)}, 1, &scattered);
    set_int(g, sc, "axis", 0);
    if (sc && overlap && otter_node_set_attr_string(sc, "reduction", "add") != OTTER_OK) OT_GRAD_NOMEM(g);
    OT_G1(g, "Reshape", dx, scattered, shape);
}

/* AveragePool: dX = ConvTranspose(dY / count, ones[C, 1, k...], group C) with the pooling's strides
 * and pads, output_padding making it X's size; count is the window size, or the number of real
 * (unpadded) elements per window when count_include_pad is 0. Needs static channel and spatial
 * sizes; otherwise (or with auto_pad) ORT's AveragePoolGrad (default domain) does it. */
void ot_grad_avgpool(ot_grad *g, otter_node *n) {
    const char *dx = ot_grad_dx(g, 0), *dy = ot_grad_dy(g, 0);
    const otter_type *tx = ot_grad_type(g, IN(0)), *ty = ot_grad_type(g, OUT(0));
    const otter_attr *k = otter_node_attr(n, "kernel_shape"), *st = otter_node_attr(n, "strides"),
                     *pads = otter_node_attr(n, "pads");
    const char *auto_pad = otter_node_attr_string(n, "auto_pad", "NOTSET");
    int sp = tx && tx->rank >= 3 ? tx->rank - 2 : -1;
    bool fixed = sp > 0 && k && (int)k->n_ints == sp && ty && ty->rank == tx->rank && tx->dims[1].value > 0 &&
                 tx->elem_type == OTTER_DTYPE_FLOAT && ot_streq(auto_pad, "NOTSET") && !otter_node_attr(n, "dilations");
    for (int i = 0; fixed && i < sp; i++) fixed = tx->dims[2 + i].value > 0 && ty->dims[2 + i].value > 0;
    if (!fixed) {
        otter_node *x = ot_grad_emit(g, "AveragePoolGrad", "", 1, &dy, 1, &dx);
        ot_grad_copy_attrs(g, x, n);
        ot_grad_declare_like(g, dx, IN(0));
        return;
    }
    int64_t C = tx->dims[1].value, kvol = 1, wdims[OTTER_MAX_RANK], out_pad[OTTER_MAX_RANK];
    wdims[0] = C;
    wdims[1] = 1;
    for (int i = 0; i < sp; i++) {
        int64_t s = st && i < (int)st->n_ints ? st->ints[i] : 1;
        int64_t pb = pads ? pads->ints[i] : 0, pe = pads ? pads->ints[sp + i] : 0;
        wdims[2 + i] = k->ints[i];
        kvol *= k->ints[i];
        /* What the transposed convolution falls short of X (windows floor() left out). */
        out_pad[i] = tx->dims[2 + i].value - ((ty->dims[2 + i].value - 1) * s + k->ints[i] - pb - pe);
        if (out_pad[i] < 0) out_pad[i] = 0;
    }
    /* The all-ones kernel. */
    const char *w = ot_grad_tmp(g, "ones_kernel");
    otter_tensor *ones;
    if (otter_tensor_create(&ones, w, OTTER_DTYPE_FLOAT, sp + 2, wdims) != OTTER_OK) OT_GRAD_NOMEM(g);
    for (int64_t i = 0; i < otter_tensor_numel(ones); i++) ((float *)ones->data)[i] = 1.0f;
    if (otter_graph_add_initializer(ot_grad_graph(g), ones) != OTTER_OK) OT_GRAD_NOMEM(g);
    const char *scaled;
    bool has_pads = false;
    for (size_t i = 0; pads && i < pads->n_ints; i++) has_pads |= pads->ints[i] != 0;
    if (!has_pads || otter_node_attr_int(n, "count_include_pad", 0)) {
        scaled = OT_G1(g, "Div", ot_grad_tmp(g, "dY_over_k"), dy,
                       ot_grad_const_f32(g, "window", (float)kvol, elem_type(g, IN(0))));
    } else {
        /* Real elements per window: the same pooling, counting pads, over ones, times the window size. */
        const char *shape = OT_G1(g, "Shape", ot_grad_tmp(g, "x_shape"), IN(0));
        const char *ones_x = ot_grad_tmp(g, "ones_like_x");
        otter_node *c = ot_grad_emit(g, "ConstantOfShape", "", 1, &shape, 1, &ones_x);
        otter_tensor *one;
        int64_t d1 = 1;
        if (c && (otter_tensor_create(&one, NULL, OTTER_DTYPE_FLOAT, 1, &d1) != OTTER_OK ||
                  (*(float *)one->data = 1.0f, otter_node_set_attr_tensor(c, "value", one) != OTTER_OK)))
            OT_GRAD_NOMEM(g);
        const char *frac = ot_grad_tmp(g, "valid_fraction");
        otter_node *ap = ot_grad_emit(g, "AveragePool", "", 1, &ones_x, 1, &frac);
        ot_grad_copy_attrs(g, ap, n);
        if (ap) {
            otter_attr *cip = otter_node_attr_mut(ap, "count_include_pad");
            if (cip)
                cip->i = 1;
            else
                set_int(g, ap, "count_include_pad", 1);
        }
        const char *count = OT_G1(g, "Mul", ot_grad_tmp(g, "valid_count"), frac,
                                  ot_grad_const_f32(g, "window", (float)kvol, OTTER_DTYPE_FLOAT));
        scaled = OT_G1(g, "Div", ot_grad_tmp(g, "dY_over_count"), dy, count);
    }
    otter_node *ct = ot_grad_emit(g, "ConvTranspose", "", 2, (const char *[]){scaled, w}, 1, &dx);
    set_int(g, ct, "group", C);
    if (ct && (otter_node_set_attr_ints(ct, "kernel_shape", k->n_ints, k->ints) != OTTER_OK ||
               (st && otter_node_set_attr_ints(ct, "strides", st->n_ints, st->ints) != OTTER_OK) ||
               (pads && otter_node_set_attr_ints(ct, "pads", pads->n_ints, pads->ints) != OTTER_OK) ||
               otter_node_set_attr_ints(ct, "output_padding", (size_t)sp, out_pad) != OTTER_OK))
        OT_GRAD_NOMEM(g);
}

/* dX = Expand(dY / (H*W...), shape(X)). */
void ot_grad_global_avgpool(ot_grad *g, otter_node *n) {
    const otter_type *t = ot_grad_type(g, IN(0));
    const char *scale;
    int64_t count = 1;
    bool known = t && t->rank >= 3;
    for (int i = 2; known && i < t->rank; i++) {
        if (t->dims[i].value < 0)
            known = false;
        else
            count *= t->dims[i].value;
    }
    if (known) {
        scale = ot_grad_const_f32(g, "Scale", (float)count, elem_type(g, IN(0)));
    } else {
        const char *ratio = OT_G1(g, "Div", ot_grad_tmp(g, "Scale"), OT_G1(g, "Size", ot_grad_tmp(g, "X_Size"), IN(0)),
                                  OT_G1(g, "Size", ot_grad_tmp(g, "Y_Size"), OUT(0)));
        otter_node *c = ot_grad_emit(g, "Cast", "", 1, &ratio, 1, (const char *[]){ot_grad_tmp(g, "Scale_f")});
        set_int(g, c, "to", elem_type(g, IN(0)));
        scale = c ? c->outputs[0] : NULL;
    }
    const char *scaled = OT_G1(g, "Div", ot_grad_tmp(g, "scaled_dY"), ot_grad_dy(g, 0), scale);
    OT_G1(g, "Expand", ot_grad_dx(g, 0), scaled, OT_G1(g, "Shape", ot_grad_tmp(g, "x_shape"), IN(0)));
}

/* LRN: Y = X / D^beta, D = bias + alpha/size * (sum of X^2 over a window of channels [c - lo, c + hi]).
 * dX = dY D^-beta - 2 alpha beta X * (average over the mirrored window [c - hi, c + lo] of dY Y / D).
 * The channel windows are AveragePools (padding counted, so average = sum / size) over X viewed as
 * [N, 1, C, rest]; that view needs a static channel count. */
static const char *channel_window_mean(ot_grad *g, const char *t, int64_t C, int64_t size, int64_t before,
                                       int64_t after, const char *x_shape) {
    const int64_t view_dims[] = {0, 1, C, -1};
    const char *view = OT_G1(g, "Reshape", ot_grad_tmp(g, "channel_view"), t,
                             ot_grad_const_i64(g, "channel_view_shape", 4, view_dims, false));
    const char *pooled = ot_grad_tmp(g, "window_mean");
    otter_node *p = ot_grad_emit(g, "AveragePool", "", 1, &view, 1, &pooled);
    set_int(g, p, "count_include_pad", 1);
    const int64_t kernel[] = {size, 1}, pads[] = {before, 0, after, 0};
    if (p && (otter_node_set_attr_ints(p, "kernel_shape", 2, kernel) != OTTER_OK ||
              otter_node_set_attr_ints(p, "pads", 4, pads) != OTTER_OK))
        nomem(g);
    return OT_G1(g, "Reshape", ot_grad_tmp(g, "window_mean_x"), p ? pooled : NULL, x_shape);
}

void ot_grad_lrn(ot_grad *g, otter_node *n) {
    const otter_type *t = ot_grad_type(g, IN(0));
    if (!t || t->rank < 3 || t->dims[1].value <= 0)
        OT_GRAD_FAIL(g, OTTER_ERR_UNSUPPORTED, "LRN gradient needs the channel count of '%s'", IN(0));
    int64_t size = otter_node_attr_int(n, "size", 1), lo = (size - 1) / 2, hi = size - 1 - lo, C = t->dims[1].value;
    float alpha = otter_node_attr_float(n, "alpha", 1e-4f), beta = otter_node_attr_float(n, "beta", 0.75f);
    otter_dtype dt = elem_type(g, IN(0));
    const char *x = IN(0), *dy = ot_grad_dy(g, 0);
    const char *x_shape = OT_G1(g, "Shape", ot_grad_tmp(g, "x_shape"), x);
    const char *sq = OT_G1(g, "Mul", ot_grad_tmp(g, "square"), x, x);
    const char *d =
        OT_G1(g, "Add", ot_grad_tmp(g, "D"), ot_grad_const_f32(g, "bias", otter_node_attr_float(n, "bias", 1.0f), dt),
              OT_G1(g, "Mul", ot_grad_tmp(g, "alpha_mean"), ot_grad_const_f32(g, "alpha", alpha, dt),
                    channel_window_mean(g, sq, C, size, lo, hi, x_shape)));
    const char *direct =
        OT_G1(g, "Mul", ot_grad_tmp(g, "direct"), dy,
              OT_G1(g, "Pow", ot_grad_tmp(g, "D_pow"), d, ot_grad_const_f32(g, "minus_beta", -beta, dt)));
    const char *ratio =
        OT_G1(g, "Div", ot_grad_tmp(g, "dY_Y_over_D"), OT_G1(g, "Mul", ot_grad_tmp(g, "dY_Y"), dy, OUT(0)), d);
    const char *back = channel_window_mean(g, ratio, C, size, hi, lo, x_shape);
    const char *cross = OT_G1(g, "Mul", ot_grad_tmp(g, "cross"), back,
                              OT_G1(g, "Mul", ot_grad_tmp(g, "scaled_X"), x,
                                    ot_grad_const_f32(g, "two_alpha_beta", 2.0f * alpha * beta, dt)));
    OT_G1(g, "Sub", ot_grad_dx(g, 0), direct, cross);
}

/* ---- normalization, dropout, softmax ------------------------------------------------------ */

void ot_grad_layernorm(ot_grad *g, otter_node *n) {
    const char *mean = ot_grad_forward_output(g, n, 1, "saved_mean");
    const char *inv_std = ot_grad_forward_output(g, n, 2, "saved_inv_std_dev");
    const char *outs[3];
    for (size_t i = 0; i < 3; i++) {
        outs[i] = i < n->n_inputs ? ot_grad_dx(g, i) : NULL;
        if (!outs[i]) outs[i] = ot_grad_tmp(g, "unused_grad");
    }
    otter_node *x = ot_grad_emit(g, "LayerNormalizationGrad", "com.microsoft", 5,
                                 (const char *[]){ot_grad_dy(g, 0), IN(0), IN(1), mean, inv_std}, 3, outs);
    ot_grad_copy_attrs(g, x, n);
}

/* A training-mode BatchNormalization node becomes com.microsoft BatchNormInternal (which also returns
 * the batch mean and inverse std the gradient needs), as ORT rewrites it. */
static void make_batchnorm_internal(ot_grad *g, otter_node *n) {
    if (ot_streq(n->domain, "com.microsoft")) return;
    if (otter_node_set_domain(n, "com.microsoft") != OTTER_OK) OT_GRAD_NOMEM(g);
    char *op = ot_strdup("BatchNormInternal");
    if (!op) OT_GRAD_NOMEM(g);
    ot_free(n->op_type);
    n->op_type = op;
    otter_attr *tm = otter_node_attr_mut(n, "training_mode");
    if (tm)
        tm->i = 1;
    else
        set_int(g, n, "training_mode", 1);
}

void ot_grad_batchnorm(ot_grad *g, otter_node *n) {
    make_batchnorm_internal(g, n);
    for (size_t i = 1; i < 3; i++) ot_grad_forward_output(g, n, i, i == 1 ? "running_mean" : "running_var");
    const char *mean = ot_grad_forward_output(g, n, 3, "saved_mean");
    const char *inv_std = ot_grad_forward_output(g, n, 4, "saved_inv_std");
    const char *outs[3];
    for (size_t i = 0; i < 3; i++) {
        outs[i] = ot_grad_dx(g, i);
        if (!outs[i]) outs[i] = ot_grad_tmp(g, "unused_grad");
    }
    otter_node *x = ot_grad_emit(g, "BatchNormalizationGrad", "com.microsoft", 5,
                                 (const char *[]){ot_grad_dy(g, 0), IN(0), IN(1), mean, inv_std}, 3, outs);
    const otter_attr *eps = otter_node_attr(n, "epsilon");
    if (eps) set_float(g, x, "epsilon", eps->f);
}

const char *ot_grad_batchnorm_recompute(ot_grad *g, const char *y) {
    otter_graph *gr = ot_grad_graph(g);
    ptrdiff_t p = otter_graph_find_producer(gr, y);
    otter_node *n = p >= 0 ? gr->nodes[p] : NULL;
    bool onnx = n && ot_str_empty(n->domain) && ot_streq(n->op_type, "BatchNormalization") &&
                otter_node_attr_int(n, "training_mode", 0) == 1;
    bool internal = n && ot_streq(n->domain, "com.microsoft") && ot_streq(n->op_type, "BatchNormInternal") &&
                    otter_node_attr_int(n, "training_mode", 1) == 1;
    int rank = ot_grad_rank(g, y);
    if ((!onnx && !internal) || n->n_inputs < 5 || !ot_streq(OUT(0), y) || rank < 2 ||
        elem_type(g, y) != OTTER_DTYPE_FLOAT)
        return y;
    make_batchnorm_internal(g, n);
    for (size_t i = 1; i < 3; i++) ot_grad_forward_output(g, n, i, i == 1 ? "running_mean" : "running_var");
    const char *mean = ot_grad_forward_output(g, n, 3, "saved_mean");
    const char *inv_std = ot_grad_forward_output(g, n, 4, "saved_inv_std");
    /* per channel, as BatchNormInternal's kernel: k = scale * inv_std, shift = B - mean * k */
    const char *k = OT_G1(g, "Mul", ot_grad_tmp(g, "bn_k"), IN(1), inv_std);
    const char *shift =
        OT_G1(g, "Sub", ot_grad_tmp(g, "bn_shift"), IN(2), OT_G1(g, "Mul", ot_grad_tmp(g, "bn_mean_k"), mean, k));
    int64_t per_channel[OTTER_MAX_RANK] = {-1, 1, 1, 1, 1, 1, 1, 1};
    const char *shape = ot_grad_const_i64(g, "bn_channel_shape", (size_t)rank - 1, per_channel, false);
    const char *kc = OT_G1(g, "Reshape", ot_grad_tmp(g, "bn_k_c"), k, shape);
    const char *sc = OT_G1(g, "Reshape", ot_grad_tmp(g, "bn_shift_c"), shift, shape);
    return OT_G1(g, "Add", ot_grad_tmp(g, "bn_recomputed"), OT_G1(g, "Mul", ot_grad_tmp(g, "bn_xk"), IN(0), kc), sc);
}

void ot_grad_dropout(ot_grad *g, otter_node *n) {
    const char *mask = ot_grad_forward_output(g, n, 1, "mask");
    const char *ins[4] = {ot_grad_dy(g, 0), mask, "", ""};
    size_t n_in = 2;
    for (size_t i = 1; i < n->n_inputs && i < 3; i++) ins[n_in++] = IN(i);
    const char *dx = ot_grad_dx(g, 0);
    otter_node *x = ot_grad_emit(g, "DropoutGrad", "com.microsoft", n_in, ins, 1, &dx);
    ot_grad_copy_attrs(g, x, n);
}

void ot_grad_softmax(ot_grad *g, otter_node *n) {
    bool v13 = ot_grad_opset(g) >= 13;
    const char *op = ot_streq(n->op_type, "Softmax") ? (v13 ? "SoftmaxGrad_13" : "SoftmaxGrad")
                                                     : (v13 ? "LogSoftmaxGrad_13" : "LogSoftmaxGrad");
    const char *dx = ot_grad_dx(g, 0);
    otter_node *x = ot_grad_emit(g, op, "com.microsoft", 2, (const char *[]){ot_grad_dy(g, 0), OUT(0)}, 1, &dx);
    ot_grad_copy_attrs(g, x, n);
}

/* ---- losses --------------------------------------------------------------------------------- */

void ot_grad_sce(ot_grad *g, otter_node *n) {
    const char *log_prob = ot_grad_forward_output(g, n, 1, "log_prob");
    const char *ins[3] = {ot_grad_dy(g, 0), log_prob, IN(1)};
    size_t n_in = 3;
    const char *all[4] = {ins[0], ins[1], ins[2], n->n_inputs > 2 ? IN(2) : ""};
    if (n->n_inputs > 2 && IN(2)[0]) n_in = 4;
    const char *dx = ot_grad_dx(g, 0);
    otter_node *x = ot_grad_emit(g, "SoftmaxCrossEntropyLossGrad", "com.microsoft", n_in, all, 1, &dx);
    ot_grad_copy_attrs(g, x, n);
}

/* NegativeLogLikelihoodLoss is linear in its input: dX[n, c, ...] = -dY' * w[t] * (c == t), with
 * dY' = dY / sum(w[t]) for mean, dY for sum, dY[n, ...] for none; ignored targets get 0. */
void ot_grad_nll(ot_grad *g, otter_node *n) {
    const char *x = IN(0), *t = IN(1);
    otter_dtype dt = elem_type(g, x);
    const char *dy = ot_grad_dy(g, 0);
    const char *reduction = otter_node_attr_string(n, "reduction", "mean");
    const otter_attr *ign = otter_node_attr(n, "ignore_index");
    const char *t_safe = t, *valid = NULL;
    if (ign) {
        const char *ig = ot_grad_const_i64(g, "ignore_index", 1, &ign->i, true);
        valid = OT_G1(g, "Not", ot_grad_tmp(g, "valid"), OT_G1(g, "Equal", ot_grad_tmp(g, "ignored"), t, ig));
        int64_t zero = 0;
        t_safe =
            OT_G1(g, "Where", ot_grad_tmp(g, "target_safe"), valid, t, ot_grad_const_i64(g, "zero", 1, &zero, true));
    }
    /* w_n: per-element weight (0 where ignored). */
    const char *w = NULL;
    if (n->n_inputs > 2 && IN(2)[0]) w = OT_G1(g, "Gather", ot_grad_tmp(g, "weight_n"), IN(2), t_safe);
    if (valid) {
        otter_node *c = ot_grad_emit(g, "Cast", "", 1, &valid, 1, (const char *[]){ot_grad_tmp(g, "valid_f")});
        set_int(g, c, "to", dt);
        const char *vf = c ? c->outputs[0] : NULL;
        w = w ? OT_G1(g, "Mul", ot_grad_tmp(g, "weight_valid"), w, vf) : vf;
    }
    if (!w) {
        /* All ones, shaped like the target. */
        const char *shape = OT_G1(g, "Shape", ot_grad_tmp(g, "t_shape"), t);
        otter_node *c = ot_grad_emit(g, "ConstantOfShape", "", 1, &shape, 1, (const char *[]){ot_grad_tmp(g, "ones")});
        otter_tensor *one;
        int64_t d = 1;
        if (c && (otter_tensor_create(&one, NULL, dt, 1, &d) != OTTER_OK ||
                  (*(float *)one->data = 1.0f, otter_node_set_attr_tensor(c, "value", one)) != OTTER_OK))
            nomem(g);
        w = c ? c->outputs[0] : NULL;
    }
    const char *scale = dy;
    if (strcmp(reduction, "mean") == 0)
        scale = OT_G1(g, "Div", ot_grad_tmp(g, "dY_mean"), dy, OT_G1(g, "ReduceSum", ot_grad_tmp(g, "weight_sum"), w));
    const char *coef = OT_G1(g, "Neg", ot_grad_tmp(g, "coef"), OT_G1(g, "Mul", ot_grad_tmp(g, "w_dY"), w, scale));
    /* One-hot of the target along axis 1, times the coefficient unsqueezed at axis 1. */
    int64_t one_axis = 1, zero_one[2] = {0, 1};
    const char *depth = OT_G1(g, "Gather", ot_grad_tmp(g, "depth"), OT_G1(g, "Shape", ot_grad_tmp(g, "x_shape"), x),
                              ot_grad_const_i64(g, "class_axis", 1, &one_axis, true));
    const char *values = ot_grad_const_i64(g, "onehot_values", 2, zero_one, false);
    otter_node *oh = ot_grad_emit(g, "OneHot", "", 3, (const char *[]){t_safe, depth, values}, 1,
                                  (const char *[]){ot_grad_tmp(g, "onehot")});
    set_int(g, oh, "axis", 1);
    otter_node *ohc = ot_grad_emit(g, "Cast", "", 1, (const char *[]){oh ? oh->outputs[0] : NULL}, 1,
                                   (const char *[]){ot_grad_tmp(g, "onehot_f")});
    set_int(g, ohc, "to", dt);
    const char *coef_u =
        OT_G1(g, "Unsqueeze", ot_grad_tmp(g, "coef_u"), coef, ot_grad_const_i64(g, "axes", 1, &one_axis, false));
    OT_G1(g, "Mul", ot_grad_dx(g, 0), ohc ? ohc->outputs[0] : NULL, coef_u);
}
