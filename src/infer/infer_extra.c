/* Shape inference: ConvInteger, QLinearConv, QLinearMatMul, GridSample, MaxUnpool, RoiAlign,
 * NonMaxSuppression, Unique, DFT, STFT, the window generators, MelWeightMatrix, StringNormalizer,
 * TfIdfVectorizer and Multinomial. Output shapes follow the ONNX definitions and the kernels in
 * runtime/ops (extra.c, nn_*.c, linalg.c, random.c). */
#include "infer/infer_internal.h"
#include "ops/shape_math.h"

/* The one value of scalar (or 1-element) integer input i, when known. */
static bool in_scalar_int(const ot_inode *n, size_t i, int64_t *value) {
    int64_t *v, count;
    if (!ot_in(n, i) || !ot_in_int64s(n, i, &v, &count) || count != 1) return false;
    *value = v[0];
    return true;
}

/* a when it says something (a size or a symbol), else b */
static ot_idim either_dim(ot_idim a, ot_idim b) { return a.v >= 0 || a.param ? a : b; }

/* ---- operators whose shapes are another operator's ---- */

otter_status ot_infer_as(ot_inode *n, ot_infer_fn rule, int64_t opset, size_t n_in, const ot_ival *const *in,
                         const char *const *names) {
    /* the same node seen through the other operator's input list, so its errors name the right
     * tensors */
    otter_node view = *n->node;
    view.inputs = (char **)names;
    view.n_inputs = n_in;
    ot_inode sub = *n;
    sub.node = &view;
    sub.opset = opset;
    sub.in = (const ot_ival **)in;
    sub.n_in = n_in;
    return rule(&sub);
}

otter_status ot_infer_as_picked(ot_inode *n, ot_infer_fn rule, int64_t opset, size_t n_pick, const int *pick,
                                bool hide_types) {
    const ot_ival **in = ot_inf_alloc(n->cx, sizeof(ot_ival *) * (n_pick + 1));
    const char **names = ot_inf_alloc(n->cx, sizeof(char *) * (n_pick + 1));
    if (!in || !names) return OT_INF_NOMEM(n);
    for (size_t k = 0; k < n_pick; k++) {
        const ot_ival *v = pick[k] >= 0 ? ot_in(n, (size_t)pick[k]) : NULL;
        names[k] = v ? n->node->inputs[pick[k]] : "";
        if (v && hide_types && v->kind == OTTER_TYPE_TENSOR) {
            ot_ival *untyped = ot_inf_alloc(n->cx, sizeof *untyped);
            if (!untyped) return OT_INF_NOMEM(n);
            *untyped = *v;
            untyped->dtype = OTTER_DTYPE_UNDEFINED;
            v = untyped;
        }
        in[k] = v;
    }
    return ot_infer_as(n, rule, opset, n_pick, in, names);
}

/* ---- quantized convolution and matmul ---- */

/* The quantized operators mix element types the float rules refuse (uint8 activations with int8
 * weights): their shapes come from the float rule with element types hidden, output 0's type is dt. */
static otter_status quantized_shape(ot_inode *n, ot_infer_fn rule, size_t n_pick, const int *pick, otter_dtype dt) {
    OT_TRY(ot_infer_as_picked(n, rule, n->opset, n_pick, pick, true));
    if (n->n_out > 0 && n->out[0].kind == OTTER_TYPE_TENSOR)
        n->out[0].dtype = dt;
    else
        ot_out_type(n, 0, dt);
    return OTTER_OK;
}

otter_status ot_infer_conv_integer(ot_inode *n) {
    static const int pick[] = {0, 1};
    return quantized_shape(n, ot_infer_conv, 2, pick, OTTER_DTYPE_INT32);
}

/* x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point[, B] */
otter_status ot_infer_qlinear_conv(ot_inode *n) {
    static const int pick[] = {0, 3, 8};
    otter_dtype dt = ot_in_dtype(n, 7) != OTTER_DTYPE_UNDEFINED ? ot_in_dtype(n, 7) : ot_in_dtype(n, 0);
    return quantized_shape(n, ot_infer_conv, n->n_in > 8 ? 3 : 2, pick, dt);
}

/* a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point */
otter_status ot_infer_qlinear_matmul(ot_inode *n) {
    static const int pick[] = {0, 3};
    otter_dtype dt = ot_in_dtype(n, 7) != OTTER_DTYPE_UNDEFINED ? ot_in_dtype(n, 7) : ot_in_dtype(n, 0);
    return quantized_shape(n, ot_infer_matmul_integer, 2, pick, dt);
}

/* ---- sampling and pooling ---- */

/* X [N, C, D1..Dr], grid [N, D1_out..Dr_out, r] -> [N, C, D1_out..Dr_out] */
otter_status ot_infer_gridsample(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0), *grid = ot_in(n, 1);
    otter_dtype dt = ot_in_dtype(n, 0);
    int rank = ot_in_has_shape(n, 0) ? x->rank : ot_in_has_shape(n, 1) ? grid->rank : -1;
    if (rank < 0) return ot_out_shape(n, 0, dt, -1, NULL);
    if (rank < 3) return ot_inf_fail(n, OTTER_ERR_INVALID, "input '%s' must have rank >= 3", n->node->inputs[0]);
    if (ot_in_has_shape(n, 1)) {
        if (grid->rank != rank)
            return ot_inf_fail(n, OTTER_ERR_INVALID, "grid '%s' has rank %d, expected %d", n->node->inputs[1],
                               grid->rank, rank);
        ot_idim last = grid->dims[rank - 1];
        if (last.v >= 0 && last.v != rank - 2)
            return ot_inf_fail(n, OTTER_ERR_INVALID, "grid '%s' has %lld coordinates per point, expected %d",
                               n->node->inputs[1], (long long)last.v, rank - 2);
    }
    OT_TRY(ot_out_shape(n, 0, dt, rank, NULL));
    ot_idim *out = n->out[0].dims;
    out[0] = either_dim(ot_in_dim(n, 0, 0), ot_in_dim(n, 1, 0));
    out[1] = ot_in_dim(n, 0, 1);
    for (int i = 2; i < rank; i++) out[i] = ot_in_dim(n, 1, i - 1);
    return OTTER_OK;
}

/* X [N, C, D...], I like X[, output_shape] -> [N, C, (D - 1) * stride + kernel - pads] or output_shape */
otter_status ot_infer_maxunpool(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 0);
    int64_t *shape, n_shape;
    if (ot_in(n, 2) && ot_in_int64s(n, 2, &shape, &n_shape)) {
        ot_idim *d = ot_inf_dims(n->cx, (int)n_shape);
        if (!d) return OT_INF_NOMEM(n);
        for (int64_t i = 0; i < n_shape; i++) d[i] = shape[i] >= 0 ? ot_dim_known(shape[i]) : OT_DIM_UNKNOWN;
        return ot_out_shape(n, 0, dt, (int)n_shape, d);
    }
    if (!ot_in_has_shape(n, 0)) return ot_out_shape(n, 0, dt, -1, NULL);
    if (x->rank < 3) return ot_inf_fail(n, OTTER_ERR_INVALID, "input '%s' must have rank >= 3", n->node->inputs[0]);
    int k = x->rank - 2;
    OT_TRY(ot_out_shape(n, 0, dt, x->rank, x->dims));
    if (ot_in(n, 2)) { /* an output_shape not known here */
        for (int i = 2; i < x->rank; i++) n->out[0].dims[i] = OT_DIM_UNKNOWN;
        return OTTER_OK;
    }
    const int64_t *kernel, *strides = NULL, *pads = NULL;
    size_t nk, ns = 0, np = 0;
    if (!ot_attr_ints(n, "kernel_shape", &kernel, &nk) || (int)nk != k)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "attribute 'kernel_shape' needs %d entries", k);
    if (ot_attr_ints(n, "strides", &strides, &ns) && (int)ns != k)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "strides has %zu entries for %d spatial dimensions", ns, k);
    if (ot_attr_ints(n, "pads", &pads, &np) && (int)np != 2 * k)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "pads has %zu entries for %d spatial dimensions", np, k);
    for (int i = 0; i < k; i++) {
        ot_idim in = x->dims[i + 2];
        if (in.v < 0) {
            n->out[0].dims[i + 2] = OT_DIM_UNKNOWN;
            continue;
        }
        int64_t pb = pads ? pads[i] : 0, pe = pads ? pads[i + k] : 0, size = 0;
        /* unpooling is a transposed window (the same rule as the kernel) */
        if (ot_window_transpose_axis(in.v, kernel[i], strides ? strides[i] : 1, 1, 0, OT_AUTO_PAD_NOTSET, -1, true, &pb,
                                     &pe, &size) != OT_WINDOW_OK)
            return ot_inf_fail(n, OTTER_ERR_INVALID, "strides, kernel_shape and pads leave spatial axis %d no output",
                               i);
        n->out[0].dims[i + 2] = ot_dim_known(size);
    }
    return OTTER_OK;
}

/* X [N, C, H, W], rois [R, 4], batch_indices [R] -> [R, C, output_height, output_width] */
otter_status ot_infer_roialign(ot_inode *n) {
    ot_idim d[4] = {either_dim(ot_in_dim(n, 1, 0), ot_in_dim(n, 2, 0)), ot_in_dim(n, 0, 1),
                    ot_dim_known(ot_attr_int(n, "output_height", 1)), ot_dim_known(ot_attr_int(n, "output_width", 1))};
    if (ot_in_has_shape(n, 0) && ot_in(n, 0)->rank != 4)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "input '%s' must have rank 4", n->node->inputs[0]);
    return ot_out_shape(n, 0, ot_in_dtype(n, 0), 4, d);
}

/* [number of selected boxes, 3] (batch, class, box) */
otter_status ot_infer_nonmaxsuppression(ot_inode *n) {
    ot_idim d[2] = {OT_DIM_UNKNOWN, ot_dim_known(3)};
    return ot_out_shape(n, 0, OTTER_DTYPE_INT64, 2, d);
}

/* Y: the unique values (1-D) or slices along axis; indices and counts: one per unique entry;
 * inverse_indices: one per input element (or slice). */
otter_status ot_infer_unique(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 0);
    const otter_attr *axis_attr = ot_attr(n, "axis");
    ot_idim unique_count = OT_DIM_UNKNOWN, n_inverse = OT_DIM_UNKNOWN;
    if (!axis_attr) {
        OT_TRY(ot_out_shape(n, 0, dt, 1, &unique_count));
        int64_t numel;
        if (ot_in_has_shape(n, 0) && ot_dims_product(x->dims, x->rank, &numel)) n_inverse = ot_dim_known(numel);
    } else if (ot_in_has_shape(n, 0)) {
        int64_t axis;
        OT_TRY(ot_norm_axis(n, axis_attr->i, x->rank, &axis));
        OT_TRY(ot_out_shape(n, 0, dt, x->rank, x->dims));
        n->out[0].dims[axis] = unique_count;
        n_inverse = x->dims[axis];
    } else {
        ot_out_type(n, 0, dt);
    }
    OT_TRY(ot_out_shape(n, 1, OTTER_DTYPE_INT64, 1, &unique_count));
    OT_TRY(ot_out_shape(n, 2, OTTER_DTYPE_INT64, 1, &n_inverse));
    return ot_out_shape(n, 3, OTTER_DTYPE_INT64, 1, &unique_count);
}

/* ---- signal processing ---- */

/* input [batch, n1..nk, 1 or 2] -> same with dims[axis] = dft_length (halved + 1 when onesided)
 * and a last dimension of 2 (real, imaginary) */
otter_status ot_infer_dft(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 0);
    if (!ot_in_has_shape(n, 0)) return ot_out_shape(n, 0, dt, -1, NULL);
    if (x->rank < 2) return ot_inf_fail(n, OTTER_ERR_INVALID, "input '%s' must have rank >= 2", n->node->inputs[0]);
    int64_t axis = ot_attr_int(n, "axis", 1);
    if (n->opset >= 20) {
        axis = -2;
        if (ot_in(n, 2) && !in_scalar_int(n, 2, &axis)) { /* axis not known: only the rank is */
            OT_TRY(ot_out_shape(n, 0, dt, x->rank, NULL));
            bool irfft = ot_attr_int(n, "onesided", 0) && ot_attr_int(n, "inverse", 0);
            n->out[0].dims[x->rank - 1] = ot_dim_known(irfft ? 1 : 2);
            return OTTER_OK;
        }
    }
    OT_TRY(ot_norm_axis(n, axis, x->rank, &axis));
    if (axis == x->rank - 1)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "axis %lld is the real/imaginary dimension", (long long)axis);
    OT_TRY(ot_out_shape(n, 0, dt, x->rank, x->dims));
    ot_idim *out = n->out[0].dims;
    /* IRFFT (inverse and onesided): a real signal of dft_length, by default 2 * (bins - 1) */
    bool onesided = ot_attr_int(n, "onesided", 0) != 0, irfft = onesided && ot_attr_int(n, "inverse", 0);
    out[x->rank - 1] = ot_dim_known(irfft ? 1 : 2);
    ot_idim length = x->dims[axis];
    if (irfft) length = length.v >= 1 ? ot_dim_known(2 * (length.v - 1)) : OT_DIM_UNKNOWN;
    int64_t given;
    if (ot_in(n, 1)) length = in_scalar_int(n, 1, &given) ? ot_dim_known(given) : OT_DIM_UNKNOWN;
    if (onesided && !irfft) length = length.v >= 0 ? ot_dim_known(length.v / 2 + 1) : OT_DIM_UNKNOWN;
    out[axis] = length;
    return OTTER_OK;
}

/* signal [batch, length, 1 or 2], frame_step, window [frame_length], frame_length
 * -> [batch, frames, bins, 2] */
otter_status ot_infer_stft(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 0);
    if (ot_in_has_shape(n, 0) && x->rank != 3)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "signal '%s' must have rank 3", n->node->inputs[0]);
    int64_t step, frame; /* frame_length: input 3, else the window's length (the kernel wants both equal) */
    if (!in_scalar_int(n, 1, &step)) step = -1;
    if (!in_scalar_int(n, 3, &frame)) frame = ot_in_dim(n, 2, 0).v;
    ot_idim length = ot_in_dim(n, 0, 1), d[4] = {ot_in_dim(n, 0, 0), OT_DIM_UNKNOWN, OT_DIM_UNKNOWN, ot_dim_known(2)};
    if (step > 0 && frame > 0 && length.v >= frame) d[1] = ot_dim_known((length.v - frame) / step + 1);
    if (frame > 0) d[2] = ot_dim_known(ot_attr_int(n, "onesided", 1) ? frame / 2 + 1 : frame);
    return ot_out_shape(n, 0, dt, 4, d);
}

/* size (scalar) -> [size] of output_datatype */
otter_status ot_infer_window(ot_inode *n) {
    int64_t size;
    ot_idim d = in_scalar_int(n, 0, &size) && size >= 0 ? ot_dim_known(size) : OT_DIM_UNKNOWN;
    return ot_out_shape(n, 0, (otter_dtype)ot_attr_int(n, "output_datatype", OTTER_DTYPE_FLOAT), 1, &d);
}

/* num_mel_bins, dft_length, ... -> [dft_length / 2 + 1, num_mel_bins] of output_datatype */
otter_status ot_infer_melweightmatrix(ot_inode *n) {
    int64_t bins, length;
    ot_idim d[2] = {OT_DIM_UNKNOWN, OT_DIM_UNKNOWN};
    if (in_scalar_int(n, 1, &length) && length > 0) d[0] = ot_dim_known(length / 2 + 1);
    if (in_scalar_int(n, 0, &bins) && bins >= 0) d[1] = ot_dim_known(bins);
    return ot_out_shape(n, 0, (otter_dtype)ot_attr_int(n, "output_datatype", OTTER_DTYPE_FLOAT), 2, d);
}

/* ---- text ---- */

/* X [C] or [1, C]; stopwords may remove elements (all removed: one empty string remains) */
otter_status ot_infer_stringnormalizer(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    if (!ot_in_has_shape(n, 0)) return ot_out_shape(n, 0, OTTER_DTYPE_STRING, -1, NULL);
    if (x->rank != 1 && x->rank != 2)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "input '%s' must have shape [C] or [1, C], not rank %d",
                           n->node->inputs[0], x->rank);
    if (x->rank == 2 && x->dims[0].v >= 0 && x->dims[0].v != 1)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "input '%s' must have shape [C] or [1, C], not [%lld, C]",
                           n->node->inputs[0], (long long)x->dims[0].v);
    const otter_attr *stop = ot_attr(n, "stopwords");
    ot_idim c = x->dims[x->rank - 1];
    bool keeps_all = (!stop || stop->n_strings == 0) && c.v > 0;
    ot_idim d[2] = {ot_dim_known(1), keeps_all ? c : OT_DIM_UNKNOWN};
    return ot_out_shape(n, 0, OTTER_DTYPE_STRING, x->rank, x->rank == 2 ? d : d + 1);
}

/* X [C] or [N, C] -> [max(ngram_indexes) + 1] or [N, max(ngram_indexes) + 1], float */
otter_status ot_infer_tfidfvectorizer(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    const int64_t *idx;
    size_t count;
    ot_idim width = OT_DIM_UNKNOWN;
    if (ot_attr_ints(n, "ngram_indexes", &idx, &count)) {
        int64_t max = -1;
        for (size_t i = 0; i < count; i++)
            if (idx[i] > max) max = idx[i];
        width = ot_dim_known(max + 1);
    }
    if (!ot_in_has_shape(n, 0)) return ot_out_shape(n, 0, OTTER_DTYPE_FLOAT, -1, NULL);
    if (x->rank != 1 && x->rank != 2)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "input '%s' must have rank 1 or 2, not %d", n->node->inputs[0],
                           x->rank);
    ot_idim d[2] = {x->dims[0], width};
    return ot_out_shape(n, 0, OTTER_DTYPE_FLOAT, x->rank, x->rank == 2 ? d : d + 1);
}

/* ---- random sampling ---- */

/* input [batch, classes] -> [batch, sample_size] of dtype (int32 by default) */
otter_status ot_infer_multinomial(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    if (ot_in_has_shape(n, 0) && x->rank != 2)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "input '%s' must have rank 2, not %d", n->node->inputs[0], x->rank);
    ot_idim d[2] = {ot_in_dim(n, 0, 0), ot_dim_known(ot_attr_int(n, "sample_size", 1))};
    return ot_out_shape(n, 0, (otter_dtype)ot_attr_int(n, "dtype", OTTER_DTYPE_INT32), 2, d);
}
