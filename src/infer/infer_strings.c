/* Shape rules of the string operators of opset 20 (runtime/ops/strings.c); StringConcat and
 * RegexFullMatch share the elementwise rules. */
#include "infer/infer_internal.h"

/* X [d...] -> Y [d..., widest split] strings, Z [d...] int64 counts */
otter_status ot_infer_string_split(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 0);
    if (dt != OTTER_DTYPE_UNDEFINED && dt != OTTER_DTYPE_STRING)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "input '%s' must be a string tensor", n->node->inputs[0]);
    if (!ot_in_has_shape(n, 0)) {
        ot_out_type(n, 0, OTTER_DTYPE_STRING);
        ot_out_type(n, 1, OTTER_DTYPE_INT64);
        return OTTER_OK;
    }
    if (x->rank >= OTTER_MAX_RANK)
        return ot_inf_fail(n, OTTER_ERR_UNSUPPORTED, "input '%s' has rank %d; the output needs one more",
                           n->node->inputs[0], x->rank);
    ot_idim *d = ot_inf_dims(n->cx, x->rank + 1); /* the last one depends on the data */
    if (!d) return OT_INF_NOMEM(n);
    for (int i = 0; i < x->rank; i++) d[i] = x->dims[i];
    OT_TRY(ot_out_shape(n, 0, OTTER_DTYPE_STRING, x->rank + 1, d));
    return ot_out_shape(n, 1, OTTER_DTYPE_INT64, x->rank, x->dims);
}
