/* Shape rules of the image geometry operators (runtime/ops/image.c): CenterCropPad, Col2Im, AffineGrid. */
#include "infer/infer_internal.h"

/* input_data, shape[, axes] -> input_data's shape with the axes set to shape's values */
otter_status ot_infer_center_crop_pad(ot_inode *n) {
    otter_dtype dt = ot_in_dtype(n, 0);
    if (!ot_in_has_shape(n, 0)) return ot_out_shape(n, 0, dt, -1, NULL);
    const ot_ival *x = ot_in(n, 0);
    OT_TRY(ot_out_shape(n, 0, dt, x->rank, x->dims));
    const int64_t *axes = NULL;
    size_t na = (size_t)x->rank;
    ot_attr_ints(n, "axes", &axes, &na);
    const ot_idim *shape;
    int64_t ns;
    bool known = ot_in_ints(n, 1, &shape, &ns);
    if (known && ns != (int64_t)na)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "shape '%s' holds %lld values for %zu axes", n->node->inputs[1],
                           (long long)ns, na);
    for (size_t k = 0; k < na; k++) {
        int64_t d = (int64_t)k;
        if (axes) OT_TRY(ot_norm_axis(n, axes[k], x->rank, &d));
        n->out[0].dims[d] = known ? ot_data_to_dim(shape[k]) : OT_DIM_UNKNOWN;
    }
    return OTTER_OK;
}

/* input [N, C * prod(block_shape), L], image_shape, block_shape -> [N, C, image_shape...] */
otter_status ot_infer_col2im(ot_inode *n) {
    otter_dtype dt = ot_in_dtype(n, 0);
    const ot_idim *img;
    int64_t *blk, ni, nb;
    if (!ot_in_ints(n, 1, &img, &ni)) {
        /* the rank follows from image_shape's length when that is known */
        ot_idim len = ot_in_dim(n, 1, 0);
        return ot_out_shape(n, 0, dt, ot_in_has_shape(n, 1) && len.v >= 0 ? 2 + (int)len.v : -1, NULL);
    }
    OT_TRY(ot_out_shape(n, 0, dt, 2 + (int)ni, NULL));
    ot_idim *out = n->out[0].dims;
    out[0] = ot_in_dim(n, 0, 0);
    for (int64_t i = 0; i < ni; i++) out[2 + i] = ot_data_to_dim(img[i]);
    ot_idim rows = ot_in_dim(n, 0, 1);
    int64_t kprod = 1;
    if (ot_in_int64s(n, 2, &blk, &nb)) {
        if (nb != ni)
            return ot_inf_fail(n, OTTER_ERR_INVALID, "block_shape '%s' has %lld values, image_shape '%s' %lld",
                               n->node->inputs[2], (long long)nb, n->node->inputs[1], (long long)ni);
        for (int64_t i = 0; i < nb; i++) kprod *= blk[i];
        if (rows.v >= 0 && kprod > 0) {
            if (rows.v % kprod)
                return ot_inf_fail(n, OTTER_ERR_INVALID, "input '%s' has %lld rows, not a multiple of the block's %lld",
                                   n->node->inputs[0], (long long)rows.v, (long long)kprod);
            out[1] = ot_dim_known(rows.v / kprod);
        }
    }
    return OTTER_OK;
}

/* theta (N, r, r + 1), size (N, C, spatial...) of r + 2 values -> (N, spatial..., r) */
otter_status ot_infer_affine_grid(ot_inode *n) {
    otter_dtype dt = ot_in_dtype(n, 0);
    const ot_idim *size;
    int64_t ns;
    bool known = ot_in_ints(n, 1, &size, &ns);
    if (!known) { /* the rank follows from size's length, N from theta */
        ot_idim len = ot_in_dim(n, 1, 0);
        if (!ot_in_has_shape(n, 1) || len.v < 0) return ot_out_shape(n, 0, dt, -1, NULL);
        ns = len.v;
    }
    if (ns != 4 && ns != 5)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "size '%s' must hold 4 (N, C, H, W) or 5 (N, C, D, H, W) values",
                           n->node->inputs[1]);
    OT_TRY(ot_out_shape(n, 0, dt, (int)ns, NULL));
    ot_idim *out = n->out[0].dims;
    out[0] = known ? ot_data_to_dim(size[0]) : ot_in_dim(n, 0, 0);
    for (int64_t i = 2; known && i < ns; i++) out[i - 1] = ot_data_to_dim(size[i]);
    out[ns - 1] = ot_dim_known(ns - 2);
    return OTTER_OK;
}
