/* Shape inference: ai.onnx.preview.training optimizers (Adagrad, Momentum, Adam) and the
 * quantization operators. */
#include "infer/infer_internal.h"

/* Adagrad / Momentum: inputs R, T, X[n], G[n], S[n] -> X_new[n], S_new[n].
 * Adam: inputs R, T, X[n], G[n], V[n], H[n] -> X_new[n], V_new[n], H_new[n]. */
static otter_status optimizer(ot_inode *n, size_t groups_in, size_t groups_out) {
    if (n->n_in < 2 || (n->n_in - 2) % groups_in != 0)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "%zu inputs do not form R, T and %zu groups of tensors", n->n_in,
                           groups_in);
    size_t k = (n->n_in - 2) / groups_in;
    for (size_t i = 0; i < n->n_out; i++) {
        size_t group = i / (k ? k : 1), j = i % (k ? k : 1);
        size_t src = group == 0 ? 2 + j : 2 + (group + 1) * k + j; /* skip the gradients group */
        OT_TRY(ot_out_like(n, i, src));
    }
    (void)groups_out;
    return OTTER_OK;
}
otter_status ot_infer_adagrad(ot_inode *n) { return optimizer(n, 3, 2); }
otter_status ot_infer_adam(ot_inode *n) { return optimizer(n, 4, 3); }

/* QuantizeLinear's y: the zero point's type, else output_dtype (opset 21), else uint8. */
otter_status ot_infer_quantize(ot_inode *n) {
    int64_t od = n->opset >= 21 ? ot_attr_int(n, "output_dtype", 0) : 0;
    otter_dtype dt = ot_in(n, 2) ? ot_in_dtype(n, 2) : od ? (otter_dtype)od : OTTER_DTYPE_UINT8;
    const ot_ival *x = ot_in(n, 0);
    if (ot_in_has_shape(n, 0)) return ot_out_shape(n, 0, dt, x->rank, x->dims);
    ot_out_type(n, 0, dt);
    return OTTER_OK;
}

/* DequantizeLinear's y: output_dtype (opset 23), else the scale's type (opset 19), else float. */
otter_status ot_infer_dequantize(ot_inode *n) {
    int64_t od = n->opset >= 23 ? ot_attr_int(n, "output_dtype", 0) : 0;
    otter_dtype dt = od ? (otter_dtype)od : n->opset >= 19 ? ot_in_dtype(n, 1) : OTTER_DTYPE_FLOAT;
    if (dt == OTTER_DTYPE_UNDEFINED) dt = OTTER_DTYPE_FLOAT;
    const ot_ival *x = ot_in(n, 0);
    if (ot_in_has_shape(n, 0)) return ot_out_shape(n, 0, dt, x->rank, x->dims);
    ot_out_type(n, 0, dt);
    return OTTER_OK;
}

otter_status ot_infer_dynamic_quantize(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    if (ot_in_has_shape(n, 0))
        OT_TRY(ot_out_shape(n, 0, OTTER_DTYPE_UINT8, x->rank, x->dims));
    else
        ot_out_type(n, 0, OTTER_DTYPE_UINT8);
    OT_TRY(ot_out_shape(n, 1, OTTER_DTYPE_FLOAT, 0, NULL));
    return ot_out_shape(n, 2, OTTER_DTYPE_UINT8, 0, NULL);
}
