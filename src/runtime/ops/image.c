/* Image geometry operators of opsets 18-20: CenterCropPad, Col2Im and AffineGrid. */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "runtime/op.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/conv_geom.h"
#include "runtime/ops/im2col.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/strided.h"

/* ---- CenterCropPad (opset 18) -------------------------------------------------------------------- */

/* Each axis of `shape` keeps a centered window of the input (start rounded down) or pads the input
 * with zeros around it (the odd pixel on the right); the innermost axis moves as one memcpy per row. */
otter_status ot_kernel_center_crop_pad(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    if (x->dtype == OTTER_DTYPE_STRING) return ot_ctx_bad_type(ctx, 0, x->dtype);
    int r = x->rank;
    if (r < 1) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' is a scalar", ot_ctx_input_name(ctx, 0));
    int64_t shape[OTTER_MAX_RANK], ns;
    OT_TRY(ot_ctx_input_ints(ctx, 1, shape, OTTER_MAX_RANK, &ns));
    int64_t out[OTTER_MAX_RANK], shift[OTTER_MAX_RANK] = {0}; /* input index = output index + shift */
    memcpy(out, x->dims, sizeof(int64_t) * (size_t)r);
    const otter_attr *axes = otter_node_attr(ctx->node, "axes");
    int64_t na = axes ? (int64_t)axes->n_ints : r;
    if (ns != na)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "shape '%s' holds %lld values for %lld axes",
                            ot_ctx_input_name(ctx, 1), (long long)ns, (long long)na);
    for (int64_t k = 0; k < na; k++) {
        int64_t d = axes ? axes->ints[k] : k;
        if (!ot_norm_axis(&d, r) || shape[k] < 0)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld (size %lld) is out of range for rank %d",
                                (long long)(axes ? axes->ints[k] : k), (long long)shape[k], r);
        out[d] = shape[k];
        shift[d] = x->dims[d] >= shape[k] ? (x->dims[d] - shape[k]) / 2 : -((shape[k] - x->dims[d]) / 2);
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, r, out);
    if (!y) return ctx->output_status;
    int64_t ny = otter_tensor_numel(y);
    if (ny == 0) return OTTER_OK;
    size_t es = otter_dtype_size(x->dtype);
    int64_t in_st[OTTER_MAX_RANK];
    ot_contiguous_strides(r, x->dims, in_st);
    int64_t W = out[r - 1], lo = shift[r - 1] < 0 ? -shift[r - 1] : 0;
    int64_t hi = x->dims[r - 1] - shift[r - 1] < W ? x->dims[r - 1] - shift[r - 1] : W;
    memset(y->data, 0, (size_t)ny * es);
    for (int64_t row = 0; row < ny / W; row++) {
        int64_t q = row, src = 0;
        bool inside = true;
        for (int d = r - 2; d >= 0; d--) {
            int64_t i = q % out[d] + shift[d];
            q /= out[d];
            if (i < 0 || i >= x->dims[d]) inside = false;
            src += i * in_st[d];
        }
        if (inside && hi > lo)
            memcpy((char *)y->data + (size_t)(row * W + lo) * es,
                   (const char *)x->data + (size_t)(src + lo + shift[r - 1]) * es, (size_t)(hi - lo) * es);
    }
    return OTTER_OK;
}

/* ---- Col2Im (opset 18) --------------------------------------------------------------------------- */

/* input [N, C * prod(block), L] -> [N, C, image...]: every column block added back where im2col took it
 * (the adjoint of Conv's im2col, up to 3 spatial axes). */
otter_status ot_kernel_col2im(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_float_input(ctx, 0, &x));
    int64_t img[OT_SP], blk[OT_SP], ni, nb;
    OT_TRY(ot_ctx_input_ints(ctx, 1, img, OT_SP, &ni));
    OT_TRY(ot_ctx_input_ints(ctx, 2, blk, OT_SP, &nb));
    if (x->rank != 3 || ni != nb || ni < 1)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "input '%s' must be [N, C*prod(block), L] and image_shape '%s', block_shape '%s' of one "
                            "length (1 to %d)",
                            ot_ctx_input_name(ctx, 0), ot_ctx_input_name(ctx, 1), ot_ctx_input_name(ctx, 2), OT_SP);
    ot_conv_geom g = {.nd = (int)ni};
    int64_t kprod = 1, L = 1;
    for (int i = 0; i < g.nd; i++) g.in[i] = img[i], g.k[i] = blk[i], kprod *= blk[i];
    OT_TRY(ot_conv_geom_forward(ctx, &g, false));
    for (int i = 0; i < g.nd; i++) L *= g.out[i];
    if (kprod <= 0 || x->dims[1] % kprod != 0 || x->dims[2] != L)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "input '%s' has %lld rows and %lld blocks; block_shape and image_shape give %lld blocks of "
                            "%lld rows per channel",
                            ot_ctx_input_name(ctx, 0), (long long)x->dims[1], (long long)x->dims[2], (long long)L,
                            (long long)kprod);
    ot_conv_geom_to3(&g);
    int64_t C = x->dims[1] / kprod, yd[2 + OT_SP] = {x->dims[0], C};
    for (int i = 0; i < (int)ni; i++) yd[2 + i] = img[i];
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, 2 + (int)ni, yd);
    if (!y) return ctx->output_status;
    const float *X;
    float *tx = NULL, *ty = NULL, *Y;
    otter_status s = ot_ctx_input_f32(ctx, 0, x, &X, &tx);
    if (s == OTTER_OK) s = ot_output_f32(y, &Y, &ty);
    if (s == OTTER_OK) {
        const ot_conv_window w = ot_conv_geom_window(&g);
        memset(Y, 0, (size_t)otter_tensor_numel(y) * sizeof(float));
        for (int64_t n = 0; n < x->dims[0]; n++) ot_col2im(X + n * x->dims[1] * L, C, &w, Y + n * C * g.in_size, L);
        ot_output_f32_done(y, ty);
    } else {
        ot_free(ty);
    }
    ot_free(tx);
    return s;
}

/* ---- AffineGrid (opset 20) ----------------------------------------------------------------------- */

/* theta (N, r, r + 1) applied to the homogeneous positions of an evenly spaced [-1, 1] grid of
 * size (N, C, [D,] H, W): grid (N, [D,] H, W, r), x first. */
otter_status ot_kernel_affine_grid(ot_kernel_ctx *ctx) {
    const otter_tensor *theta;
    OT_TRY(ot_ctx_float_input(ctx, 0, &theta));
    int64_t size[5], ns;
    OT_TRY(ot_ctx_input_ints(ctx, 1, size, 5, &ns));
    int sp = (int)ns - 2;
    if ((sp != 2 && sp != 3) || theta->rank != 3 || theta->dims[0] != size[0] || theta->dims[1] != sp ||
        theta->dims[2] != sp + 1)
        return ot_ctx_error(
            ctx, OTTER_ERR_INVALID,
            "theta '%s' must be (N, 2, 3) with size '%s' (N, C, H, W), or (N, 3, 4) with (N, C, D, H, W)",
            ot_ctx_input_name(ctx, 0), ot_ctx_input_name(ctx, 1));
    bool align = ot_ctx_attr_int_or(ctx, "align_corners", 0) != 0;
    int64_t yd[5] = {size[0]}, points = 1;
    for (int d = 0; d < sp; d++) yd[1 + d] = size[2 + d], points *= size[2 + d];
    yd[1 + sp] = sp;
    otter_tensor *y = ot_ctx_output(ctx, 0, theta->dtype, sp + 2, yd);
    if (!y) return ctx->output_status;
    for (int64_t n = 0; n < size[0]; n++) {
        double t[12];
        for (int i = 0; i < sp * (sp + 1); i++) t[i] = ot_get_f64(theta->data, theta->dtype, n * sp * (sp + 1) + i);
        for (int64_t p = 0; p < points; p++) {
            /* the base position, innermost axis (x) first, then 1 */
            double pos[4];
            int64_t q = p;
            for (int d = sp - 1; d >= 0; d--) {
                int64_t len = size[2 + d], i = q % len;
                q /= len;
                pos[sp - 1 - d] = align ? (len > 1 ? -1 + 2.0 * (double)i / (double)(len - 1) : -1)
                                        : -1 + (2.0 * (double)i + 1) / (double)len;
            }
            pos[sp] = 1;
            for (int j = 0; j < sp; j++) {
                double v = 0;
                for (int k = 0; k <= sp; k++) v += t[j * (sp + 1) + k] * pos[k];
                ot_set_f64(y->data, y->dtype, (n * points + p) * sp + j, v);
            }
        }
    }
    return OTTER_OK;
}
