/* Shape inference: Sequence*, SplitToSequence, ConcatFromSequence, SequenceMap, Optional*.
 *
 * A sequence or optional value is a record of that kind whose `other` is its type; the types built
 * here live in the run's arena (the driver deep-copies them into value_info). Element shapes
 * follow onnx: a sequence's element shape is the union of the shapes put in it (equal dims stay,
 * others become unknown). A sequence record with n_data 0 is known to be empty (SequenceEmpty's),
 * so the first tensor inserted gives the element shape instead of joining an unknown one. */
#include <string.h>

#include "infer/infer_internal.h"

/* ---- element types ---- */

/* *type = an arena type for the tensor `v` describes (non-tensor values: their own type), or NULL
 * when too little is known (no element type). */
static otter_status type_of_ival(ot_inode *n, const ot_ival *v, const otter_type **type) {
    *type = NULL;
    if (!v || v->kind == OTTER_TYPE_NONE) return OTTER_OK;
    if (v->kind != OTTER_TYPE_TENSOR) {
        *type = v->other;
        return OTTER_OK;
    }
    if (v->dtype == OTTER_DTYPE_UNDEFINED) return OTTER_OK;
    otter_type *t = ot_inf_alloc(n->cx, sizeof *t);
    if (!t) return OT_INF_NOMEM(n);
    t->kind = OTTER_TYPE_TENSOR;
    t->elem_type = v->dtype;
    t->has_elem_type = true;
    t->rank = v->rank;
    if (v->rank > 0) {
        t->dims = ot_inf_alloc(n->cx, sizeof(otter_dim) * (size_t)v->rank);
        if (!t->dims) return OT_INF_NOMEM(n);
        for (int i = 0; i < v->rank; i++) {
            t->dims[i].value = v->dims[i].v >= 0 ? v->dims[i].v : -1;
            t->dims[i].param = (char *)v->dims[i].param;
        }
    }
    *type = t;
    return OTTER_OK;
}

/* The record of a value of type t (tensor: element type and shape; others opaque). */
static otter_status ival_of_type(ot_inode *n, const otter_type *t, ot_ival *v) {
    memset(v, 0, sizeof *v);
    v->rank = -1;
    v->n_data = -1;
    if (!t) return OTTER_OK;
    v->kind = t->kind;
    if (t->kind != OTTER_TYPE_TENSOR) {
        v->other = t;
        return OTTER_OK;
    }
    v->dtype = t->has_elem_type ? t->elem_type : OTTER_DTYPE_UNDEFINED;
    v->rank = t->rank;
    if (t->rank > 0) {
        v->dims = ot_inf_dims(n->cx, t->rank);
        if (!v->dims) return OT_INF_NOMEM(n);
        for (int i = 0; i < t->rank; i++)
            if (t->dims[i].value >= 0)
                v->dims[i] = ot_dim_known(t->dims[i].value);
            else if (t->dims[i].param && t->dims[i].param[0])
                v->dims[i].param = t->dims[i].param;
    }
    return OTTER_OK;
}

/* The element type of input i when it is a sequence (or optional) with a known element type. */
static const otter_type *in_elem(const ot_inode *n, size_t i, otter_type_kind kind) {
    const ot_ival *v = ot_in(n, i);
    return v && v->kind == kind && v->other ? v->other->elem : NULL;
}

/* Output i is a `kind` (sequence or optional) of elem; unknown when elem is NULL. */
static otter_status out_wrapped(ot_inode *n, size_t i, otter_type_kind kind, const otter_type *elem) {
    if (i >= n->n_out || !elem) return OTTER_OK;
    otter_type *t = ot_inf_alloc(n->cx, sizeof *t);
    if (!t) return OT_INF_NOMEM(n);
    t->kind = kind;
    t->rank = -1;
    t->elem = (otter_type *)elem;
    n->out[i].kind = kind;
    n->out[i].other = t;
    return OTTER_OK;
}

/* Output i is a `kind` of the value `elem` describes. */
static otter_status out_wrapping(ot_inode *n, size_t i, otter_type_kind kind, const ot_ival *elem) {
    const otter_type *t;
    OT_TRY(type_of_ival(n, elem, &t));
    return out_wrapped(n, i, kind, t);
}

static otter_status out_sequence_of(ot_inode *n, const ot_ival *elem) {
    return out_wrapping(n, 0, OTTER_TYPE_SEQUENCE, elem);
}

/* acc = the union of acc's and b's shapes (both tensors of one element type) */
static otter_status union_shape(ot_inode *n, ot_ival *acc, const ot_ival *b) {
    if (acc->dtype != OTTER_DTYPE_UNDEFINED && b->dtype != OTTER_DTYPE_UNDEFINED && acc->dtype != b->dtype)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "sequence elements of types %s and %s", otter_dtype_name(acc->dtype),
                           otter_dtype_name(b->dtype));
    if (acc->dtype == OTTER_DTYPE_UNDEFINED) acc->dtype = b->dtype;
    if (acc->rank < 0 || b->rank != acc->rank) {
        acc->rank = -1;
        acc->dims = NULL;
        return OTTER_OK;
    }
    for (int i = 0; i < acc->rank; i++)
        if (!ot_dim_equal(acc->dims[i], b->dims[i])) acc->dims[i] = OT_DIM_UNKNOWN;
    return OTTER_OK;
}

/* A tensor record's type and shape, copied so it can be narrowed (values dropped). */
static otter_status tensor_copy(ot_inode *n, ot_ival *dst, const ot_ival *src) {
    OT_TRY(ot_ival_copy(n->cx, dst, src));
    dst->n_data = -1;
    dst->idata = NULL;
    dst->fdata = NULL;
    return OTTER_OK;
}

/* ---- sequences ---- */

otter_status ot_infer_sequence_empty(ot_inode *n) {
    ot_ival elem;
    memset(&elem, 0, sizeof elem);
    elem.kind = OTTER_TYPE_TENSOR;
    elem.dtype = (otter_dtype)ot_attr_int(n, "dtype", OTTER_DTYPE_FLOAT);
    elem.rank = -1;
    OT_TRY(out_sequence_of(n, &elem));
    if (n->n_out) n->out[0].n_data = 0;
    return OTTER_OK;
}

otter_status ot_infer_sequence_construct(ot_inode *n) {
    ot_ival elem = {0};
    for (size_t i = 0; i < n->n_in; i++) {
        const ot_ival *x = ot_in(n, i);
        if (!x || x->kind != OTTER_TYPE_TENSOR) return OTTER_OK;
        if (i == 0)
            OT_TRY(tensor_copy(n, &elem, x));
        else
            OT_TRY(union_shape(n, &elem, x));
    }
    return n->n_in ? out_sequence_of(n, &elem) : OTTER_OK;
}

/* input_sequence, tensor[, position] */
otter_status ot_infer_sequence_insert(ot_inode *n) {
    const ot_ival *x = ot_in(n, 1);
    const otter_type *seq_elem = in_elem(n, 0, OTTER_TYPE_SEQUENCE);
    if (!x || x->kind != OTTER_TYPE_TENSOR) return ot_out_like(n, 0, 0);
    ot_ival elem;
    OT_TRY(tensor_copy(n, &elem, x));
    if (seq_elem && seq_elem->kind == OTTER_TYPE_TENSOR && ot_in(n, 0)->n_data != 0) {
        ot_ival existing;
        OT_TRY(ival_of_type(n, seq_elem, &existing));
        OT_TRY(union_shape(n, &elem, &existing));
    }
    return out_sequence_of(n, &elem);
}

otter_status ot_infer_sequence_at(ot_inode *n) {
    const otter_type *elem = in_elem(n, 0, OTTER_TYPE_SEQUENCE);
    return n->n_out && elem ? ival_of_type(n, elem, &n->out[0]) : OTTER_OK;
}

otter_status ot_infer_sequence_length(ot_inode *n) { return ot_out_shape(n, 0, OTTER_DTYPE_INT64, 0, NULL); }

/* input, split (scalar: chunks of that size, the last one smaller; 1-D: the sizes) -> the parts,
 * each of rank r (r - 1 without split when keepdims is 0) */
otter_status ot_infer_split_to_sequence(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    if (!x || x->kind != OTTER_TYPE_TENSOR) return OTTER_OK;
    ot_ival elem;
    OT_TRY(tensor_copy(n, &elem, x));
    if (x->rank < 0) return out_sequence_of(n, &elem);
    int64_t axis;
    OT_TRY(ot_norm_axis(n, ot_attr_int(n, "axis", 0), x->rank, &axis));
    const ot_ival *split = ot_in(n, 1);
    if (!split) {
        if (ot_attr_int(n, "keepdims", 1)) {
            elem.dims[axis] = ot_dim_known(1);
        } else {
            for (int i = (int)axis; i + 1 < x->rank; i++) elem.dims[i] = elem.dims[i + 1];
            elem.rank--;
        }
        return out_sequence_of(n, &elem);
    }
    /* every part has the same size along axis when split's sizes are all equal, or it is one
     * size that divides the dimension */
    int64_t *sizes, count;
    ot_idim part = OT_DIM_UNKNOWN;
    if (ot_in_int64s(n, 1, &sizes, &count) && count > 0) {
        bool equal = true;
        for (int64_t i = 1; i < count; i++) equal = equal && sizes[i] == sizes[0];
        bool scalar = split->rank == 0;
        ot_idim d = x->dims[axis];
        if (sizes[0] <= 0) return ot_inf_fail(n, OTTER_ERR_INVALID, "split sizes must be positive");
        if (equal && (!scalar || (d.v >= 0 && d.v % sizes[0] == 0))) part = ot_dim_known(sizes[0]);
    }
    elem.dims[axis] = part;
    return out_sequence_of(n, &elem);
}

/* elements [d0..d_{r-1}] -> concatenated along axis (new_axis 0) or stacked on a new axis */
otter_status ot_infer_concat_from_sequence(ot_inode *n) {
    const otter_type *t = in_elem(n, 0, OTTER_TYPE_SEQUENCE);
    const otter_attr *axis_attr = ot_attr(n, "axis");
    if (!axis_attr || axis_attr->type != OTTER_ATTR_INT)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "attribute 'axis' is required");
    if (!t || t->kind != OTTER_TYPE_TENSOR) return OTTER_OK;
    ot_ival elem;
    OT_TRY(ival_of_type(n, t, &elem));
    if (elem.rank < 0) return ot_out_shape(n, 0, elem.dtype, -1, NULL);
    bool new_axis = ot_attr_int(n, "new_axis", 0) != 0;
    int rank = elem.rank + (new_axis ? 1 : 0);
    int64_t axis;
    OT_TRY(ot_norm_axis(n, axis_attr->i, rank, &axis));
    OT_TRY(ot_out_shape(n, 0, elem.dtype, rank, NULL));
    for (int i = 0, j = 0; i < rank; i++) {
        if (new_axis && i == axis) continue; /* the sequence's length: unknown */
        n->out[0].dims[i] = i == axis ? OT_DIM_UNKNOWN : elem.dims[j];
        j++;
    }
    return OTTER_OK;
}

/* body(one element of each sequence input, tensor inputs as they are) -> a sequence per output */
otter_status ot_infer_sequence_map(ot_inode *n) {
    const otter_attr *a = ot_attr(n, "body");
    if (!a || a->type != OTTER_ATTR_GRAPH || !a->g)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "attribute 'body' is required");
    otter_graph *g = a->g;
    if (g->n_inputs != n->n_in || g->n_outputs != n->n_out)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "body has %zu inputs and %zu outputs, the node %zu and %zu",
                           g->n_inputs, g->n_outputs, n->n_in, n->n_out);
    const ot_ival **given = ot_inf_alloc(n->cx, sizeof(ot_ival *) * (n->n_in + 1));
    ot_ival *outs = ot_inf_alloc(n->cx, sizeof(ot_ival) * (n->n_out + 1));
    if (!given || !outs) return OT_INF_NOMEM(n);
    for (size_t i = 0; i < n->n_in; i++) {
        const ot_ival *v = ot_in(n, i);
        if (!v || v->kind != OTTER_TYPE_SEQUENCE) {
            given[i] = v && v->kind != OTTER_TYPE_NONE ? v : NULL;
            continue;
        }
        ot_ival *e = ot_inf_alloc(n->cx, sizeof *e);
        if (!e) return OT_INF_NOMEM(n);
        OT_TRY(ival_of_type(n, in_elem(n, i, OTTER_TYPE_SEQUENCE), e));
        given[i] = e->kind != OTTER_TYPE_NONE ? e : NULL;
    }
    for (size_t i = 0; i < n->n_out; i++) outs[i].rank = -1, outs[i].n_data = -1;
    OT_TRY(ot_infer_subgraph(n, g, n->n_in, given, outs, n->n_out));
    for (size_t i = 0; i < n->n_out; i++) {
        outs[i].n_data = -1; /* each element has its own values */
        OT_TRY(out_wrapping(n, i, OTTER_TYPE_SEQUENCE, &outs[i]));
    }
    return OTTER_OK;
}

/* ---- optionals ---- */

/* optional(input's type); without an input the type comes from the attribute 'type', a serialized
 * TypeProto otter keeps undecoded, so the output's type stays unknown then */
otter_status ot_infer_optional(ot_inode *n) { return out_wrapping(n, 0, OTTER_TYPE_OPTIONAL, ot_in(n, 0)); }

otter_status ot_infer_optional_has_element(ot_inode *n) { return ot_out_shape(n, 0, OTTER_DTYPE_BOOL, 0, NULL); }

/* optional(T) -> T; from opset 18 a tensor or sequence passes through */
otter_status ot_infer_optional_get_element(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    if (x && (x->kind == OTTER_TYPE_TENSOR || x->kind == OTTER_TYPE_SEQUENCE)) return ot_out_like(n, 0, 0);
    const otter_type *elem = in_elem(n, 0, OTTER_TYPE_OPTIONAL);
    return n->n_out && elem ? ival_of_type(n, elem, &n->out[0]) : OTTER_OK;
}
