/* Gradient rules for the geometric operators: GridSample, AffineGrid, Col2Im, DeformConv, RoiAlign.
 * ONNX Runtime's training runtime has no gradient for them. GridSample, DeformConv and RoiAlign emit
 * com.otter gradient operators (runtime/ops/nn_sample.c, deform_conv.c, extra.c) that follow
 * PyTorch's / torchvision's backward; AffineGrid and Col2Im, linear in the input, are undone with standard operators.
 * The forward nodes stay the standard operators. */
#include "autodiff/grad.h"
#include "core/core.h"

#define IN(i)  (n->inputs[i])
#define OUT(i) (n->outputs[i])

static void set_int(ot_grad *g, otter_node *m, const char *name, int64_t v) {
    if (m && otter_node_set_attr_int(m, name, v) != OTTER_OK)
        ot_grad_fail(g, OTTER_ERR_NOMEM, "out of memory building gradients");
}

/* Concat of 1-D shape tensors into a fresh tensor; returns its name (NULL on failure). */
static const char *concat_shapes(ot_grad *g, const char *hint, size_t count, const char *const *ins) {
    const char *out = ot_grad_tmp(g, hint);
    otter_node *c = ot_grad_emit(g, "Concat", "", count, ins, 1, &out);
    set_int(g, c, "axis", 0);
    return c ? out : NULL;
}

/* GridSample(X, grid) -> Y: com.otter GridSampleGrad(dY, X, grid) -> dX, dgrid with GridSample's
 * attributes ("" for a gradient not needed; the kernel computes both together). */
void ot_grad_gridsample(ot_grad *g, otter_node *n) {
    const char *outs[2];
    for (size_t i = 0; i < 2; i++) {
        outs[i] = ot_grad_dx(g, i);
        if (!outs[i]) outs[i] = "";
    }
    otter_node *x =
        ot_grad_emit(g, "GridSampleGrad", "com.otter", 3, (const char *[]){ot_grad_dy(g, 0), IN(0), IN(1)}, 2, outs);
    ot_grad_copy_attrs(g, x, n);
}

/* AffineGrid(theta (N, r, r+1), size) -> grid (N, P..., r) with grid[n, p, j] = sum_k theta[n, j, k] *
 * base[k, p], base the evenly spaced positions with a row of ones appended; so dtheta[n, j, k] =
 * sum_p dgrid[n, p, j] * base[k, p]. base comes from AffineGrid itself, on size with batch r + 1
 * and theta E[b] = a matrix whose first row is the b-th unit vector: row b of its first output
 * coordinate is base[b] (this keeps size a run-time input). */
void ot_grad_affine_grid(ot_grad *g, otter_node *n) {
    int rank = ot_grad_rank(g, OUT(0));
    if (rank != 4 && rank != 5)
        OT_GRAD_FAIL(g, OTTER_ERR_UNSUPPORTED, "AffineGrid gradient needs the grid's rank (4 or 5), it is %d", rank);
    int64_t r = rank - 2, one = 1, big = INT64_MAX, zero = 0;
    const char *e_name = ot_grad_tmp(g, "unit_rows");
    otter_tensor *e;
    if (!e_name || otter_tensor_create(&e, e_name, OTTER_DTYPE_FLOAT, 3, (int64_t[]){r + 1, r, r + 1}) != OTTER_OK)
        OT_GRAD_NOMEM(g);
    float *ev = e->data;
    for (int64_t i = 0; i < (r + 1) * r * (r + 1); i++) ev[i] = 0;
    for (int64_t b = 0; b <= r; b++) ev[b * r * (r + 1) + b] = 1; /* E[b, 0, b] */
    if (otter_graph_add_initializer(ot_grad_graph(g), e) != OTTER_OK) OT_GRAD_NOMEM(g);
    const char *unit_rows = OT_G1(g, "CastLike", ot_grad_tmp(g, "unit_rows_typed"), e_name, IN(0));
    const char *base_size = concat_shapes(g, "base_size", 2,
                                          (const char *[]){ot_grad_const_i64(g, "rows", 1, (int64_t[]){r + 1}, false),
                                                           OT_G1(g, "Slice", ot_grad_tmp(g, "size_tail"), IN(1),
                                                                 ot_grad_const_i64(g, "one", 1, &one, false),
                                                                 ot_grad_const_i64(g, "end", 1, &big, false))});
    const char *base_grid = ot_grad_tmp(g, "base_grid");
    otter_node *ag = ot_grad_emit(g, "AffineGrid", "", 2, (const char *[]){unit_rows, base_size}, 1, &base_grid);
    ot_grad_copy_attrs(g, ag, n);
    /* (r + 1, P..., 1) -> (r + 1, P) */
    const char *base =
        OT_G1(g, "Reshape", ot_grad_tmp(g, "base"),
              OT_G1(g, "Slice", ot_grad_tmp(g, "base_first"), base_grid, ot_grad_const_i64(g, "zero", 1, &zero, false),
                    ot_grad_const_i64(g, "one", 1, &one, false),
                    ot_grad_const_i64(g, "last_axis", 1, (int64_t[]){-1}, false)),
              ot_grad_const_i64(g, "base_shape", 2, (int64_t[]){r + 1, -1}, false));
    const char *dy_points = OT_G1(g, "Reshape", ot_grad_tmp(g, "dgrid_points"), ot_grad_dy(g, 0),
                                  ot_grad_const_i64(g, "points_shape", 3, (int64_t[]){0, -1, r}, false));
    /* (r + 1, P) @ (N, P, r) -> (N, r + 1, r), transposed to theta's (N, r, r + 1) */
    const char *dx = ot_grad_dx(g, 0);
    otter_node *t =
        ot_grad_emit(g, "Transpose", "", 1,
                     (const char *[]){OT_G1(g, "MatMul", ot_grad_tmp(g, "dtheta_t"), base, dy_points)}, 1, &dx);
    if (t && otter_node_set_attr_ints(t, "perm", 3, (int64_t[]){0, 2, 1}) != OTTER_OK) OT_GRAD_NOMEM(g);
}

/* Col2Im(X (N, C*K, L), image_shape, block_shape) -> (N, C, image...) adds each column block back to
 * the image, so dX = im2col(dY): a Conv of dY's channels, one at a time, with the identity over the
 * block's K taps as weights (K, 1, block...) and Col2Im's strides, pads and dilations, reshaped to
 * X's shape. The identity is built at run time from block_shape (EyeLike on K x K zeros). */
void ot_grad_col2im(ot_grad *g, otter_node *n) {
    const char *k = OT_G1(g, "ReduceProd", ot_grad_tmp(g, "block_size"), IN(2)); /* keepdims: shape (1) */
    const char *eye = OT_G1(
        g, "EyeLike", ot_grad_tmp(g, "eye"),
        OT_G1(g, "ConstantOfShape", ot_grad_tmp(g, "zeros"), concat_shapes(g, "eye_shape", 2, (const char *[]){k, k})));
    int64_t one = 1, minus_one = -1;
    const char *one_c = ot_grad_const_i64(g, "one", 1, &one, false);
    const char *weights =
        OT_G1(g, "Reshape", ot_grad_tmp(g, "weights"), OT_G1(g, "CastLike", ot_grad_tmp(g, "eye_typed"), eye, IN(0)),
              concat_shapes(g, "weights_shape", 3, (const char *[]){k, one_c, IN(2)}));
    const char *dy = ot_grad_dy(g, 0), *image = ot_grad_tmp(g, "image_shape");
    otter_node *sh = ot_grad_emit(g, "Shape", "", 1, &dy, 1, &image);
    set_int(g, sh, "start", 2);
    const char *channels =
        OT_G1(g, "Reshape", ot_grad_tmp(g, "dy_channels"), dy,
              concat_shapes(g, "channels_shape", 3,
                            (const char *[]){ot_grad_const_i64(g, "minus_one", 1, &minus_one, false), one_c, image}));
    const char *cols = ot_grad_tmp(g, "columns");
    otter_node *conv = ot_grad_emit(g, "Conv", "", 2, (const char *[]){channels, weights}, 1, &cols);
    ot_grad_copy_attrs(g, conv, n);
    OT_G1(g, "Reshape", ot_grad_dx(g, 0), cols, OT_G1(g, "Shape", ot_grad_tmp(g, "x_shape"), IN(0)));
}

/* DeformConv(X, W, offset[, B[, mask]]) -> Y: com.otter DeformConvGrad(dY, X, W, offset, B, mask) ->
 * dX, dW, doffset, dB, dmask with DeformConv's attributes ("" for the gradients not needed). */
void ot_grad_deform_conv(ot_grad *g, otter_node *n) {
    const char *ins[6] = {ot_grad_dy(g, 0), "", "", "", "", ""}, *outs[5];
    for (size_t i = 0; i < 5; i++) {
        bool present = i < n->n_inputs && IN(i)[0];
        if (present) ins[1 + i] = IN(i);
        outs[i] = present ? ot_grad_dx(g, i) : NULL;
        if (!outs[i]) outs[i] = "";
    }
    otter_node *x = ot_grad_emit(g, "DeformConvGrad", "com.otter", 6, ins, 5, outs);
    ot_grad_copy_attrs(g, x, n);
}

/* RoiAlign(X, rois, batch_indices) -> Y: com.otter RoiAlignGrad(dY, X, rois, batch_indices) -> dX
 * with RoiAlign's attributes (the rois are not differentiated, as in torchvision), and the
 * coordinate_transformation_mode in effect written out: its default depends on the ai.onnx opset
 * (half_pixel from 16, output_half_pixel before), which a com.otter node doesn't see. */
void ot_grad_roialign(ot_grad *g, otter_node *n) {
    const char *dx = ot_grad_dx(g, 0);
    const char *ctm = otter_node_attr_string(n, "coordinate_transformation_mode",
                                             ot_grad_opset(g) >= 16 ? "half_pixel" : "output_half_pixel");
    otter_node *x = ot_grad_emit(g, "RoiAlignGrad", "com.otter", 4,
                                 (const char *[]){ot_grad_dy(g, 0), IN(0), IN(1), IN(2)}, 1, &dx);
    ot_grad_copy_attrs(g, x, n);
    if (x && otter_node_set_attr_string(x, "coordinate_transformation_mode", ctm) != OTTER_OK) OT_GRAD_NOMEM(g);
}
