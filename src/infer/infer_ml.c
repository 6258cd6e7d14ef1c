/* Shape rules of the ai.onnx.ml operators (runtime/ops/ml.c); Binarizer keeps its input's shape. */
#include <string.h>

#include "infer/infer_internal.h"

/* X [..., F], indices Y (any shape, count K) -> [..., K]; X [F] -> [1, K] */
otter_status ot_infer_array_feature_extractor(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0), *y = ot_in(n, 1);
    otter_dtype dt = ot_in_dtype(n, 0);
    if (!ot_in_has_shape(n, 0) || x->rank < 1) return ot_out_shape(n, 0, dt, -1, NULL);
    int rank = x->rank == 1 ? 2 : x->rank;
    ot_idim *d = ot_inf_dims(n->cx, rank);
    if (!d) return OT_INF_NOMEM(n);
    if (x->rank == 1) d[0] = ot_dim_known(1);
    for (int i = 0; i + 1 < x->rank; i++) d[i] = x->dims[i];
    int64_t count;
    if (ot_in_has_shape(n, 1) && ot_dims_product(y->dims, y->rank, &count)) d[rank - 1] = ot_dim_known(count);
    return ot_out_shape(n, 0, dt, rank, d);
}

/* X's shape; the element type of the values_* attribute set */
otter_status ot_infer_label_encoder(ot_inode *n) {
    otter_dtype dt = OTTER_DTYPE_UNDEFINED;
    const otter_attr *t = ot_attr(n, "values_tensor");
    if (ot_attr(n, "values_strings"))
        dt = OTTER_DTYPE_STRING;
    else if (ot_attr(n, "values_int64s"))
        dt = OTTER_DTYPE_INT64;
    else if (ot_attr(n, "values_floats"))
        dt = OTTER_DTYPE_FLOAT;
    else if (t && t->t)
        dt = t->t->dtype;
    else if (ot_attr(n, "classes_strings")) /* version 1: strings <-> int64 */
        dt = ot_in_dtype(n, 0) == OTTER_DTYPE_STRING ? OTTER_DTYPE_INT64 : OTTER_DTYPE_STRING;
    const ot_ival *x = ot_in(n, 0);
    if (!ot_in_has_shape(n, 0)) return ot_out_shape(n, 0, dt, -1, NULL);
    return ot_out_shape(n, 0, dt, x->rank, x->dims);
}

/* X [N, F] -> [N, n_targets] in X's type */
otter_status ot_infer_tree_ensemble(ot_inode *n) {
    ot_idim d[2] = {ot_in_dim(n, 0, 0), ot_dim_known(ot_attr_int(n, "n_targets", 1))};
    return ot_out_shape(n, 0, ot_in_dtype(n, 0), 2, d);
}

/* X [N, F] -> Y [N, n_targets] float */
otter_status ot_infer_tree_ensemble_regressor(ot_inode *n) {
    ot_idim d[2] = {ot_in_dim(n, 0, 0), ot_dim_known(ot_attr_int(n, "n_targets", 1))};
    return ot_out_shape(n, 0, OTTER_DTYPE_FLOAT, 2, d);
}

/* X [N, F] -> labels Y [N] (int64 or string, from the classlabels_* set), scores Z [N, classes] float
 * (2 columns for a single-label binary model) */
otter_status ot_infer_tree_ensemble_classifier(ot_inode *n) {
    const otter_attr *strs = ot_attr(n, "classlabels_strings");
    ot_idim rows = ot_in_dim(n, 0, 0);
    OT_TRY(ot_out_shape(n, 0, strs && strs->n_strings ? OTTER_DTYPE_STRING : OTTER_DTYPE_INT64, 1, &rows));
    ot_idim d[2] = {rows, OT_DIM_UNKNOWN};
    return ot_out_shape(n, 1, OTTER_DTYPE_FLOAT, 2, d);
}
