/* Shape inference: Reduce*, ArgMax / ArgMin, TopK, CumSum, normalizations along an axis. */
#include <string.h>

#include "infer/infer_internal.h"
#include "ops/shape_math.h"

/* Output i: input 0 with the `reduced` axes removed, or kept with size 1 (the kernels' ot_reduce_out_axes). */
static otter_status reduced_out(ot_inode *n, size_t i, otter_dtype dt, const bool *reduced, bool keepdims) {
    const ot_ival *x = ot_in(n, 0);
    int *src = ot_inf_alloc(n->cx, sizeof(int) * (size_t)(x->rank + 1));
    ot_idim *out = ot_inf_dims(n->cx, x->rank);
    if (!src || !out) return OT_INF_NOMEM(n);
    int r = ot_reduce_out_axes(x->rank, reduced, keepdims, src);
    for (int j = 0; j < r; j++) out[j] = src[j] >= 0 ? x->dims[src[j]] : ot_dim_known(1);
    return ot_out_shape(n, i, dt, r, out);
}

/* Reductions take axes as an attribute before `since` and as input 1 from it on. */
static otter_status reduce(ot_inode *n, int64_t since) {
    const ot_ival *x = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 0);
    bool keep = ot_attr_int(n, "keepdims", 1) != 0;
    int64_t *axes = NULL, count = 0;
    bool known = true;
    if (n->opset < since) {
        const int64_t *a;
        size_t c;
        if (ot_attr_ints(n, "axes", &a, &c)) {
            axes = (int64_t *)a;
            count = (int64_t)c;
        }
    } else if (ot_in(n, 1)) {
        if (!ot_in_int64s(n, 1, &axes, &count)) known = false;
    }
    bool noop = n->opset >= since && ot_attr_int(n, "noop_with_empty_axes", 0) != 0;
    if (!ot_in_has_shape(n, 0)) {
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    if (!known) {
        if (keep) return ot_out_shape(n, 0, dt, x->rank, NULL);
        /* values unknown but their count known (and non-zero: an empty list may mean "all") */
        const ot_ival *a = ot_in(n, 1);
        if (a->kind == OTTER_TYPE_TENSOR && a->rank == 1 && a->dims[0].v > 0 && a->dims[0].v <= x->rank)
            return ot_out_shape(n, 0, dt, x->rank - (int)a->dims[0].v, NULL);
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    if (count == 0 && noop) return ot_out_like(n, 0, 0);
    bool *red = ot_inf_alloc(n->cx, sizeof(bool) * (size_t)(x->rank + 1));
    if (!red) return OT_INF_NOMEM(n);
    int64_t bad = ot_reduce_mask(x->rank, axes, count, noop, red);
    if (bad >= 0) {
        int64_t unused;
        return ot_norm_axis(n, axes[bad], x->rank, &unused); /* the error naming the axis */
    }
    return reduced_out(n, 0, dt, red, keep);
}

otter_status ot_infer_reduce_sum(ot_inode *n) { return reduce(n, 13); }
otter_status ot_infer_reduce_other(ot_inode *n) { return reduce(n, 18); }

otter_status ot_infer_arg_reduce(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    if (!ot_in_has_shape(n, 0)) {
        ot_out_type(n, 0, OTTER_DTYPE_INT64);
        return OTTER_OK;
    }
    int64_t axis;
    OT_TRY(ot_norm_axis(n, ot_attr_int(n, "axis", 0), x->rank, &axis));
    bool *red = ot_inf_alloc(n->cx, sizeof(bool) * (size_t)(x->rank + 1));
    if (!red) return OT_INF_NOMEM(n);
    ot_reduce_mask(x->rank, &axis, 1, false, red);
    return reduced_out(n, 0, OTTER_DTYPE_INT64, red, ot_attr_int(n, "keepdims", 1) != 0);
}

otter_status ot_infer_topk(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 0);
    ot_out_type(n, 0, dt);
    ot_out_type(n, 1, OTTER_DTYPE_INT64);
    if (!ot_in_has_shape(n, 0)) return OTTER_OK;
    int64_t axis;
    OT_TRY(ot_norm_axis(n, ot_attr_int(n, "axis", -1), x->rank, &axis));
    ot_idim k = OT_DIM_UNKNOWN;
    if (n->opset < 10) {
        k = ot_dim_known(ot_attr_int(n, "k", 0));
    } else {
        int64_t *kv, kc;
        if (ot_in_int64s(n, 1, &kv, &kc) && kc == 1) k = ot_dim_known(kv[0]);
    }
    if (k.v >= 0 && x->dims[axis].v >= 0 && k.v > x->dims[axis].v)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "k = %lld is larger than axis %lld of '%s' (%lld)", (long long)k.v,
                           (long long)axis, n->node->inputs[0], (long long)x->dims[axis].v);
    OT_TRY(ot_out_shape(n, 0, dt, x->rank, x->dims));
    OT_TRY(ot_out_shape(n, 1, OTTER_DTYPE_INT64, x->rank, x->dims));
    n->out[0].dims[axis] = k;
    if (n->n_out > 1) n->out[1].dims[axis] = k;
    return OTTER_OK;
}
