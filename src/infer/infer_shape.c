/* Shape inference: reshaping and data movement (Reshape, Flatten, Squeeze, Unsqueeze, Transpose,
 * Concat, Split, Slice, Gather*, Scatter*, Pad, Tile, Expand, Shape, Size, OneHot, ...), with
 * value propagation through the ops that shape computations use. */
#include <string.h>

#include "infer/infer_internal.h"

/* onnx's Dimension product: known*known, 1*x = x, else unknown. */
static ot_idim dim_mul(ot_idim a, ot_idim b) {
    if (a.v >= 0 && b.v >= 0) return ot_dim_known(a.v * b.v);
    if (a.v == 1) return b;
    if (b.v == 1) return a;
    return OT_DIM_UNKNOWN;
}

static ot_idim dims_prod(const ot_idim *d, int from, int to) {
    ot_idim p = ot_dim_known(1);
    for (int i = from; i < to; i++) p = dim_mul(p, d[i]);
    return p;
}

static ot_idim *new_data(ot_inode *n, int64_t count) {
    ot_idim *d = ot_inf_alloc(n->cx, sizeof(ot_idim) * (size_t)(count + 1));
    return d;
}

/* Output 0 takes input 0's known values when the output is small (Identity-like ops). */
static otter_status pass_data(ot_inode *n, size_t out, size_t in) {
    const ot_idim *d;
    int64_t c;
    if (ot_in_ints(n, in, &d, &c) && n->out[out].rank >= 0 && n->out[out].rank <= 1) return ot_out_idata(n, out, c, d);
    const ot_ival *v = ot_in(n, in);
    if (v && v->fdata && v->n_data >= 0 && n->out[out].rank <= 1 && !n->cx->opts->no_data_prop) {
        n->out[out].fdata = v->fdata;
        n->out[out].n_data = v->n_data;
    }
    return OTTER_OK;
}

otter_status ot_infer_identity(ot_inode *n) {
    OT_TRY(ot_out_like(n, 0, 0));
    return pass_data(n, 0, 0);
}

/* ---- Reshape, Flatten ---- */

otter_status ot_infer_reshape(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 0);
    const ot_idim *ot_infer_shape = NULL;
    int64_t count = 0;
    ot_idim *tmp = NULL;
    if (n->opset < 5) {
        const int64_t *s;
        size_t c;
        if (ot_attr_ints(n, "shape", &s, &c)) {
            tmp = new_data(n, (int64_t)c);
            if (!tmp) return OT_INF_NOMEM(n);
            for (size_t i = 0; i < c; i++) tmp[i] = (ot_idim){s[i], NULL};
            ot_infer_shape = tmp;
            count = (int64_t)c;
        }
    } else if (!ot_in_ints(n, 1, &ot_infer_shape, &count)) {
        /* values unknown: the rank is still the length of the shape tensor when that is known */
        const ot_ival *s = ot_in(n, 1);
        if (s && s->kind == OTTER_TYPE_TENSOR && s->rank == 1 && s->dims[0].v >= 0)
            return ot_out_shape(n, 0, dt, (int)s->dims[0].v, NULL);
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    if (!ot_infer_shape) {
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    if (count > OTTER_MAX_RANK * 4)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "shape has %lld entries", (long long)count);
    bool allowzero = n->opset >= 14 && ot_attr_int(n, "allowzero", 0) != 0;
    int rank = (int)count;
    bool xshape = x && x->kind == OTTER_TYPE_TENSOR && x->rank >= 0;
    int xr = xshape ? x->rank : 0;
    ot_idim *out = ot_inf_dims(n->cx, rank);
    bool *in_cancel = ot_inf_alloc(n->cx, sizeof(bool) * (size_t)(xr + 1));
    bool *out_cancel = ot_inf_alloc(n->cx, sizeof(bool) * (size_t)(rank + 1));
    if (!out || !in_cancel || !out_cancel) return OT_INF_NOMEM(n);
    int neg = -1;
    for (int i = 0; i < rank; i++) {
        ot_idim s = ot_infer_shape[i];
        if (s.param) {
            out[i] = (ot_idim){-1, s.param};
        } else if (!ot_data_is_value(s)) {
            out[i] = OT_DIM_UNKNOWN;
        } else if (s.v == -1) {
            if (neg >= 0)
                return ot_inf_fail(n, OTTER_ERR_INVALID, "shape '%s' has more than one -1", n->node->inputs[1]);
            neg = i;
        } else if (s.v == 0 && !allowzero) {
            if (xshape && i >= xr)
                return ot_inf_fail(n, OTTER_ERR_INVALID, "shape entry %d is 0 (copy) but input '%s' has rank %d", i,
                                   n->node->inputs[0], xr);
            if (xshape) {
                out[i] = x->dims[i];
                in_cancel[i] = out_cancel[i] = true; /* a copied dim cancels in the element count */
            }
        } else if (s.v < 0) {
            return ot_inf_fail(n, OTTER_ERR_INVALID, "shape entry %d is %lld", i, (long long)s.v);
        } else {
            out[i] = ot_dim_known(s.v);
        }
    }
    if (xshape) {
        /* a symbolic output entry cancels an input dim with the same symbol */
        for (int i = 0; i < rank; i++) {
            if (out_cancel[i] || i == neg || !out[i].param) continue;
            for (int k = 0; k < xr; k++)
                if (!in_cancel[k] && x->dims[k].param && strcmp(x->dims[k].param, out[i].param) == 0) {
                    in_cancel[k] = out_cancel[i] = true;
                    break;
                }
        }
        int64_t in_prod = 1, out_prod = 1;
        bool in_ok = true, out_ok = true;
        for (int k = 0; k < xr; k++) {
            if (in_cancel[k]) continue;
            if (x->dims[k].v < 0)
                in_ok = false;
            else
                in_prod *= x->dims[k].v;
        }
        for (int i = 0; i < rank; i++) {
            if (out_cancel[i] || i == neg) continue;
            if (out[i].v < 0)
                out_ok = false;
            else
                out_prod *= out[i].v;
        }
        if (neg >= 0 && in_ok && out_ok && out_prod != 0) { /* 0 entries with -1 leave it unknown */
            if (in_prod % out_prod != 0)
                return ot_inf_fail(n, OTTER_ERR_INVALID,
                                   "cannot reshape input '%s' (%lld elements) to a shape whose other entries multiply "
                                   "to %lld",
                                   n->node->inputs[0], (long long)in_prod, (long long)out_prod);
            out[neg] = ot_dim_known(in_prod / out_prod);
        } else if (neg < 0 && in_ok && out_ok && in_prod != out_prod) {
            return ot_inf_fail(n, OTTER_ERR_INVALID, "cannot reshape input '%s' of %lld elements to %lld elements",
                               n->node->inputs[0], (long long)in_prod, (long long)out_prod);
        }
    }
    OT_TRY(ot_out_shape(n, 0, dt, rank, out));
    return pass_data(n, 0, 0);
}

otter_status ot_infer_flatten(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 0);
    if (!ot_in_has_shape(n, 0)) return ot_out_shape(n, 0, dt, 2, NULL);
    int64_t axis = ot_attr_int(n, "axis", 1);
    if (axis < 0) axis += x->rank;
    if (axis < 0 || axis > x->rank)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "axis %lld is out of range for input '%s' of rank %d",
                           (long long)ot_attr_int(n, "axis", 1), n->node->inputs[0], x->rank);
    ot_idim d[2] = {dims_prod(x->dims, 0, (int)axis), dims_prod(x->dims, (int)axis, x->rank)};
    return ot_out_shape(n, 0, dt, 2, d);
}

/* ---- Squeeze, Unsqueeze ---- */

/* Axes from the attribute (opset < since) or input 1; *known false when they can't be known. */
static otter_status get_axes(ot_inode *n, int64_t since, int64_t **axes, int64_t *count, bool *present, bool *known) {
    *axes = NULL;
    *count = 0;
    *present = false;
    *known = true;
    if (n->opset < since) {
        const int64_t *a;
        size_t c;
        if (ot_attr_ints(n, "axes", &a, &c)) {
            *present = true;
            *axes = ot_inf_alloc(n->cx, sizeof(int64_t) * (c + 1));
            if (!*axes) return OT_INF_NOMEM(n);
            memcpy(*axes, a, sizeof(int64_t) * c);
            *count = (int64_t)c;
        }
        return OTTER_OK;
    }
    if (!ot_in(n, 1)) return OTTER_OK;
    *present = true;
    if (!ot_in_int64s(n, 1, axes, count)) *known = false;
    return OTTER_OK;
}

/* Length of a 1-D axes input whose values are unknown (-1 when that isn't known either). */
static int64_t axes_length(const ot_inode *n) {
    const ot_ival *a = ot_in(n, 1);
    if (n->opset < 13 || !a || a->kind != OTTER_TYPE_TENSOR || a->rank != 1 || a->dims[0].v < 0) return -1;
    return a->dims[0].v;
}

otter_status ot_infer_squeeze(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 0);
    int64_t *axes, count;
    bool present, known;
    OT_TRY(get_axes(n, 13, &axes, &count, &present, &known));
    int64_t alen = axes_length(n);
    if (ot_in_has_shape(n, 0) && !known && alen >= 0 && alen <= x->rank)
        return ot_out_shape(n, 0, dt, x->rank - (int)alen, NULL);
    if (!ot_in_has_shape(n, 0) || !known) {
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    bool *drop = ot_inf_alloc(n->cx, sizeof(bool) * (size_t)(x->rank + 1));
    if (!drop) return OT_INF_NOMEM(n);
    if (!present) {
        for (int i = 0; i < x->rank; i++) {
            if (x->dims[i].v < 0) {
                ot_out_type(n, 0, dt);
                return OTTER_OK;
            }
            drop[i] = x->dims[i].v == 1;
        }
    } else {
        for (int64_t k = 0; k < count; k++) {
            int64_t a;
            OT_TRY(ot_norm_axis(n, axes[k], x->rank, &a));
            if (x->dims[a].v >= 0 && x->dims[a].v != 1)
                return ot_inf_fail(n, OTTER_ERR_INVALID, "cannot squeeze axis %lld of input '%s': its size is %lld",
                                   (long long)axes[k], n->node->inputs[0], (long long)x->dims[a].v);
            drop[a] = true;
        }
    }
    ot_idim *out = ot_inf_dims(n->cx, x->rank);
    if (!out) return OT_INF_NOMEM(n);
    int r = 0;
    for (int i = 0; i < x->rank; i++)
        if (!drop[i]) out[r++] = x->dims[i];
    OT_TRY(ot_out_shape(n, 0, dt, r, out));
    return pass_data(n, 0, 0);
}

otter_status ot_infer_unsqueeze(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 0);
    int64_t *axes, count;
    bool present, known;
    OT_TRY(get_axes(n, 13, &axes, &count, &present, &known));
    int64_t alen = axes_length(n);
    if (ot_in_has_shape(n, 0) && !known && alen >= 0 && alen <= OTTER_MAX_RANK * 4)
        return ot_out_shape(n, 0, dt, x->rank + (int)alen, NULL);
    if (!ot_in_has_shape(n, 0) || !known || !present) {
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    int r = x->rank + (int)count;
    bool *ins = ot_inf_alloc(n->cx, sizeof(bool) * (size_t)(r + 1));
    ot_idim *out = ot_inf_dims(n->cx, r);
    if (!ins || !out) return OT_INF_NOMEM(n);
    for (int64_t k = 0; k < count; k++) {
        int64_t a;
        OT_TRY(ot_norm_axis(n, axes[k], r, &a));
        if (ins[a]) return ot_inf_fail(n, OTTER_ERR_INVALID, "axis %lld is repeated", (long long)axes[k]);
        ins[a] = true;
    }
    for (int i = 0, j = 0; i < r; i++) out[i] = ins[i] ? ot_dim_known(1) : x->dims[j++];
    OT_TRY(ot_out_shape(n, 0, dt, r, out));
    return pass_data(n, 0, 0);
}

/* ---- Transpose, Concat, Split ---- */

otter_status ot_infer_transpose(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 0);
    const int64_t *perm;
    size_t c;
    bool has_perm = ot_attr_ints(n, "perm", &perm, &c);
    if (!ot_in_has_shape(n, 0)) {
        if (has_perm) return ot_out_shape(n, 0, dt, (int)c, NULL);
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    if (has_perm && (int)c != x->rank)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "perm has %zu entries but input '%s' has rank %d", c,
                           n->node->inputs[0], x->rank);
    ot_idim *out = ot_inf_dims(n->cx, x->rank);
    bool *seen = ot_inf_alloc(n->cx, sizeof(bool) * (size_t)(x->rank + 1));
    if (!out || !seen) return OT_INF_NOMEM(n);
    for (int i = 0; i < x->rank; i++) {
        int64_t p = has_perm ? perm[i] : x->rank - 1 - i;
        if (p < 0 || p >= x->rank || seen[p])
            return ot_inf_fail(n, OTTER_ERR_INVALID, "perm is not a permutation of 0..%d", x->rank - 1);
        seen[p] = true;
        out[i] = x->dims[p];
    }
    return ot_out_shape(n, 0, dt, x->rank, out);
}

/* Merge two dims that must be equal (error when both fixed and different). */
static bool dim_unify(ot_idim *acc, ot_idim d) {
    if (acc->v >= 0 && d.v >= 0) return acc->v == d.v;
    if (acc->v >= 0) return true;
    if (d.v >= 0) {
        *acc = d;
        return true;
    }
    if (!acc->param)
        *acc = d;
    else if (d.param && strcmp(acc->param, d.param) != 0)
        *acc = OT_DIM_UNKNOWN;
    else if (!d.param)
        *acc = OT_DIM_UNKNOWN;
    return true;
}

otter_status ot_infer_concat(ot_inode *n) {
    if (n->n_in == 0) return OTTER_OK;
    OT_TRY(ot_same_dtype(n, 0, n->n_in - 1));
    otter_dtype dt = OTTER_DTYPE_UNDEFINED;
    int rank = -1;
    for (size_t i = 0; i < n->n_in; i++) {
        if (dt == OTTER_DTYPE_UNDEFINED) dt = ot_in_dtype(n, i);
        if (ot_in_has_shape(n, i)) {
            int r = ot_in(n, i)->rank;
            if (rank >= 0 && r != rank)
                return ot_inf_fail(n, OTTER_ERR_INVALID, "input '%s' has rank %d but input '%s' has rank %d",
                                   n->node->inputs[i], r, n->node->inputs[0], rank);
            rank = r;
        }
    }
    if (rank < 0) {
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    int64_t axis;
    OT_TRY(ot_norm_axis(n, ot_attr_int(n, "axis", 0), rank, &axis));
    ot_idim *out = ot_inf_dims(n->cx, rank);
    if (!out) return OT_INF_NOMEM(n);
    bool first = true, all = true;
    int64_t sum = 0;
    for (size_t i = 0; i < n->n_in; i++) {
        if (!ot_in_has_shape(n, i)) {
            all = false;
            continue;
        }
        const ot_ival *v = ot_in(n, i);
        for (int k = 0; k < rank; k++) {
            if (k == axis) continue;
            if (first)
                out[k] = v->dims[k];
            else if (!dim_unify(&out[k], v->dims[k]))
                return ot_inf_fail(n, OTTER_ERR_INVALID,
                                   "input '%s' has size %lld in dimension %d but other inputs have %lld",
                                   n->node->inputs[i], (long long)v->dims[k].v, k, (long long)out[k].v);
        }
        first = false;
        if (v->dims[axis].v < 0)
            all = false;
        else
            sum += v->dims[axis].v;
    }
    out[axis] = all ? ot_dim_known(sum) : OT_DIM_UNKNOWN;
    if (all && n->n_in == 1) out[axis] = ot_in(n, 0)->dims[axis];
    OT_TRY(ot_out_shape(n, 0, dt, rank, out));
    /* values: concatenation of known 1-D inputs */
    if (rank == 1) {
        int64_t total = 0;
        for (size_t i = 0; i < n->n_in; i++) {
            const ot_idim *d;
            int64_t c;
            if (!ot_in_ints(n, i, &d, &c)) return OTTER_OK;
            total += c;
        }
        ot_idim *data = new_data(n, total);
        if (!data) return OT_INF_NOMEM(n);
        int64_t at = 0;
        for (size_t i = 0; i < n->n_in; i++) {
            const ot_idim *d;
            int64_t c;
            ot_in_ints(n, i, &d, &c);
            memcpy(data + at, d, sizeof(ot_idim) * (size_t)c);
            at += c;
        }
        OT_TRY(ot_out_idata(n, 0, total, data));
    }
    return OTTER_OK;
}

otter_status ot_infer_split(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 0);
    for (size_t i = 0; i < n->n_out; i++) ot_out_type(n, i, dt);
    if (!ot_in_has_shape(n, 0)) return OTTER_OK;
    int64_t axis;
    OT_TRY(ot_norm_axis(n, ot_attr_int(n, "axis", 0), x->rank, &axis));
    int64_t *sizes = NULL, count = 0;
    bool have = false;
    if (n->opset < 13) {
        const int64_t *s;
        size_t c;
        if (ot_attr_ints(n, "split", &s, &c)) {
            sizes = (int64_t *)s;
            count = (int64_t)c;
            have = true;
        } else if (n->opset < 2 && ot_in(n, 1)) {
            if (!ot_in_int64s(n, 1, &sizes, &count)) goto unknown_sizes;
            have = true;
        }
    } else if (ot_in(n, 1)) {
        if (!ot_in_int64s(n, 1, &sizes, &count)) goto unknown_sizes;
        have = true;
    }
    ot_idim d = x->dims[axis];
    if (have) {
        if (count != (int64_t)n->n_out)
            return ot_inf_fail(n, OTTER_ERR_INVALID, "split has %lld entries but the node has %zu outputs",
                               (long long)count, n->n_out);
        int64_t total = 0;
        for (int64_t i = 0; i < count; i++) total += sizes[i];
        if (d.v >= 0 && total != d.v)
            return ot_inf_fail(n, OTTER_ERR_INVALID, "split sizes add up to %lld but axis %lld of '%s' has size %lld",
                               (long long)total, (long long)axis, n->node->inputs[0], (long long)d.v);
    }
    for (size_t i = 0; i < n->n_out; i++) {
        OT_TRY(ot_out_shape(n, i, dt, x->rank, x->dims));
        ot_idim part = OT_DIM_UNKNOWN;
        if (have) {
            part = ot_dim_known(sizes[i]);
        } else if (d.v >= 0 && n->n_out > 0) {
            int64_t k = (int64_t)n->n_out;
            if (n->opset >= 18) {
                int64_t chunk = (d.v + k - 1) / k;
                int64_t rest = d.v - chunk * (int64_t)i;
                part = ot_dim_known(rest < 0 ? 0 : rest < chunk ? rest : chunk);
            } else {
                if (d.v % k != 0)
                    return ot_inf_fail(n, OTTER_ERR_INVALID,
                                       "axis %lld of '%s' (size %lld) cannot be split in %lld equal parts",
                                       (long long)axis, n->node->inputs[0], (long long)d.v, (long long)k);
                part = ot_dim_known(d.v / k);
            }
        }
        n->out[i].dims[axis] = part;
    }
    return OTTER_OK;
unknown_sizes:
    for (size_t i = 0; i < n->n_out; i++) {
        OT_TRY(ot_out_shape(n, i, dt, x->rank, x->dims));
        n->out[i].dims[axis] = OT_DIM_UNKNOWN;
    }
    return OTTER_OK;
}

/* ---- Slice ---- */

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Length of slicing a dimension of size d (and the normalized start). */
static int64_t slice_len(int64_t d, int64_t start, int64_t end, int64_t step, int64_t *first) {
    if (start < 0) start += d;
    if (end < 0) end += d;
    if (step > 0) {
        start = clamp64(start, 0, d);
        end = clamp64(end, 0, d);
    } else {
        start = clamp64(start, 0, d - 1);
        end = clamp64(end, -1, d - 1);
    }
    *first = start;
    int64_t len = step > 0 ? (end - start + step - 1) / step : (start - end + (-step) - 1) / (-step);
    return len < 0 ? 0 : len;
}

otter_status ot_infer_slice(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 0);
    if (!ot_in_has_shape(n, 0)) {
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    int64_t *starts = NULL, *ends = NULL, *axes = NULL, *steps = NULL;
    int64_t ns = 0, ne = 0, na = -1, nst = -1;
    bool known = true;
    if (n->opset < 10) {
        const int64_t *a;
        size_t c;
        if (ot_attr_ints(n, "starts", &a, &c)) {
            starts = (int64_t *)a;
            ns = (int64_t)c;
        } else
            known = false;
        if (ot_attr_ints(n, "ends", &a, &c)) {
            ends = (int64_t *)a;
            ne = (int64_t)c;
        } else
            known = false;
        if (ot_attr_ints(n, "axes", &a, &c)) {
            axes = (int64_t *)a;
            na = (int64_t)c;
        }
    } else {
        if (!ot_in_int64s(n, 1, &starts, &ns)) known = false;
        if (!ot_in_int64s(n, 2, &ends, &ne)) known = false;
        if (ot_in(n, 3) && !ot_in_int64s(n, 3, &axes, &na)) {
            /* axes unknown: every dimension may be sliced */
            return ot_out_shape(n, 0, dt, x->rank, NULL);
        }
        if (ot_in(n, 4) && !ot_in_int64s(n, 4, &steps, &nst)) known = false;
    }
    OT_TRY(ot_out_shape(n, 0, dt, x->rank, x->dims));
    ot_idim *out = n->out[0].dims;
    if (!known) {
        if (axes) {
            for (int64_t k = 0; k < na; k++) {
                int64_t a;
                OT_TRY(ot_norm_axis(n, axes[k], x->rank, &a));
                out[a] = OT_DIM_UNKNOWN;
            }
        } else {
            /* without axes, starts covers dims 0..len-1; its length may be known from its shape */
            const ot_ival *s = n->opset >= 10 ? ot_in(n, 1) : NULL;
            int64_t len =
                s && s->kind == OTTER_TYPE_TENSOR && s->rank == 1 && s->dims[0].v >= 0 ? s->dims[0].v : x->rank;
            for (int64_t k = 0; k < len && k < x->rank; k++) out[k] = OT_DIM_UNKNOWN;
        }
        return OTTER_OK;
    }
    if (ns != ne || (na >= 0 && na != ns) || (nst >= 0 && nst != ns))
        return ot_inf_fail(n, OTTER_ERR_INVALID, "starts, ends, axes and steps have different lengths");
    int64_t first0 = 0, len0 = -1, step0 = 1;
    for (int64_t k = 0; k < ns; k++) {
        int64_t a = k;
        if (axes) OT_TRY(ot_norm_axis(n, axes[k], x->rank, &a));
        int64_t step = steps ? steps[k] : 1;
        if (step == 0) return ot_inf_fail(n, OTTER_ERR_INVALID, "step %lld is 0", (long long)k);
        ot_idim d = x->dims[a];
        if (d.v >= 0) {
            int64_t first;
            out[a] = ot_dim_known(slice_len(d.v, starts[k], ends[k], step, &first));
            if (a == 0) {
                first0 = first;
                len0 = out[a].v;
                step0 = step;
            }
        } else if (step == 1 && starts[k] == 0 && ends[k] >= INT32_MAX) {
            out[a] = d; /* the whole dimension */
        } else {
            out[a] = OT_DIM_UNKNOWN;
        }
    }
    if (x->rank == 1) {
        const ot_idim *d;
        int64_t c;
        if (ot_in_ints(n, 0, &d, &c) && len0 >= 0) {
            if (ns == 0) return ot_out_idata(n, 0, c, d);
            ot_idim *data = new_data(n, len0);
            if (!data) return OT_INF_NOMEM(n);
            for (int64_t i = 0; i < len0; i++) data[i] = d[first0 + i * step0];
            OT_TRY(ot_out_idata(n, 0, len0, data));
        }
    }
    return OTTER_OK;
}

/* ---- Gather family, Scatter ---- */

otter_status ot_infer_gather(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0), *idx = ot_in(n, 1);
    otter_dtype dt = ot_in_dtype(n, 0);
    if (!ot_in_has_shape(n, 0) || !ot_in_has_shape(n, 1)) {
        if (ot_in_has_shape(n, 0) && ot_in_has_shape(n, 1) == false) {
            ot_out_type(n, 0, dt);
            return OTTER_OK;
        }
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    int64_t axis;
    OT_TRY(ot_norm_axis(n, ot_attr_int(n, "axis", 0), x->rank, &axis));
    int r = x->rank - 1 + idx->rank;
    ot_idim *out = ot_inf_dims(n->cx, r);
    if (!out) return OT_INF_NOMEM(n);
    int k = 0;
    for (int i = 0; i < axis; i++) out[k++] = x->dims[i];
    for (int i = 0; i < idx->rank; i++) out[k++] = idx->dims[i];
    for (int i = (int)axis + 1; i < x->rank; i++) out[k++] = x->dims[i];
    OT_TRY(ot_out_shape(n, 0, dt, r, out));
    /* values: gathering from known 1-D data with known indices */
    const ot_idim *d;
    int64_t c;
    int64_t *iv, ic;
    if (x->rank == 1 && idx->rank <= 1 && ot_in_ints(n, 0, &d, &c) && ot_in_int64s(n, 1, &iv, &ic)) {
        ot_idim *data = new_data(n, ic);
        if (!data) return OT_INF_NOMEM(n);
        for (int64_t i = 0; i < ic; i++) {
            int64_t j = iv[i] < 0 ? iv[i] + c : iv[i];
            if (j < 0 || j >= c)
                return ot_inf_fail(n, OTTER_ERR_INVALID, "index %lld is out of range for '%s' of size %lld",
                                   (long long)iv[i], n->node->inputs[0], (long long)c);
            data[i] = d[j];
        }
        OT_TRY(ot_out_idata(n, 0, ic, data));
    }
    return OTTER_OK;
}

otter_status ot_infer_gather_elements(ot_inode *n) {
    otter_dtype dt = ot_in_dtype(n, 0);
    const ot_ival *idx = ot_in(n, 1);
    if (!ot_in_has_shape(n, 1)) {
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    return ot_out_shape(n, 0, dt, idx->rank, idx->dims);
}

otter_status ot_infer_gather_nd(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0), *idx = ot_in(n, 1);
    otter_dtype dt = ot_in_dtype(n, 0);
    if (!ot_in_has_shape(n, 0) || !ot_in_has_shape(n, 1) || idx->rank < 1 || idx->dims[idx->rank - 1].v < 0) {
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    int64_t b = ot_attr_int(n, "batch_dims", 0);
    int64_t last = idx->dims[idx->rank - 1].v;
    if (b + last > x->rank)
        return ot_inf_fail(n, OTTER_ERR_INVALID,
                           "indices '%s' index %lld dimensions past %lld batch dimensions of rank-%d data",
                           n->node->inputs[1], (long long)last, (long long)b, x->rank);
    int r = idx->rank - 1 + x->rank - (int)(b + last);
    ot_idim *out = ot_inf_dims(n->cx, r);
    if (!out) return OT_INF_NOMEM(n);
    int k = 0;
    for (int i = 0; i < idx->rank - 1; i++) out[k++] = idx->dims[i];
    for (int i = (int)(b + last); i < x->rank; i++) out[k++] = x->dims[i];
    return ot_out_shape(n, 0, dt, r, out);
}

/* ---- Pad, Tile, Expand ---- */

otter_status ot_infer_pad(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 0);
    if (!ot_in_has_shape(n, 0)) {
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    int64_t *pads = NULL, np = 0;
    bool known = true;
    if (n->opset < 11) {
        const int64_t *p;
        size_t c;
        if (ot_attr_ints(n, n->opset < 2 ? "paddings" : "pads", &p, &c)) {
            pads = (int64_t *)p;
            np = (int64_t)c;
        } else
            known = false;
    } else if (!ot_in_int64s(n, 1, &pads, &np)) {
        known = false;
    }
    int64_t *axes = NULL, na = x->rank;
    if (n->opset >= 18 && ot_in(n, 3)) {
        if (!ot_in_int64s(n, 3, &axes, &na)) return ot_out_shape(n, 0, dt, x->rank, NULL);
    }
    OT_TRY(ot_out_shape(n, 0, dt, x->rank, x->dims));
    if (!known) return ot_out_shape(n, 0, dt, x->rank, NULL);
    if (np != 2 * na)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "pads has %lld entries, expected %lld", (long long)np,
                           (long long)(2 * na));
    for (int64_t k = 0; k < na; k++) {
        int64_t a = k;
        if (axes) OT_TRY(ot_norm_axis(n, axes[k], x->rank, &a));
        ot_idim d = x->dims[a];
        int64_t add = pads[k] + pads[k + na];
        if (d.v >= 0)
            n->out[0].dims[a] = ot_dim_known(d.v + add);
        else if (add != 0)
            n->out[0].dims[a] = OT_DIM_UNKNOWN;
    }
    return OTTER_OK;
}

otter_status ot_infer_tile(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 0);
    if (!ot_in_has_shape(n, 0)) {
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    int64_t *rep, nr;
    if (!ot_in_int64s(n, 1, &rep, &nr)) return ot_out_shape(n, 0, dt, x->rank, NULL);
    if (nr != x->rank)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "repeats has %lld entries but input '%s' has rank %d", (long long)nr,
                           n->node->inputs[0], x->rank);
    OT_TRY(ot_out_shape(n, 0, dt, x->rank, NULL));
    for (int i = 0; i < x->rank; i++) n->out[0].dims[i] = dim_mul(x->dims[i], ot_dim_known(rep[i]));
    return OTTER_OK;
}

otter_status ot_infer_expand(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 0);
    const ot_idim *s;
    int64_t ns;
    if (!ot_in_ints(n, 1, &s, &ns)) {
        const ot_ival *sv = ot_in(n, 1);
        if (ot_in_has_shape(n, 0) && sv && sv->kind == OTTER_TYPE_TENSOR && sv->rank == 1 && sv->dims[0].v >= 0 &&
            sv->dims[0].v <= 4 * OTTER_MAX_RANK) {
            /* values unknown, length known: broadcast with that many unknown dims (a fixed input
             * dim other than 1 survives, since the target there must be 1 or equal to it) */
            ot_ival t = {0};
            t.kind = OTTER_TYPE_TENSOR;
            t.rank = (int)sv->dims[0].v;
            t.dims = ot_inf_dims(n->cx, t.rank);
            if (!t.dims) return OT_INF_NOMEM(n);
            const ot_ival *shapes[2] = {x, &t};
            int rank;
            ot_idim *dims;
            OT_TRY(ot_broadcast(n, 2, shapes, &rank, &dims));
            return ot_out_shape(n, 0, dt, rank, dims);
        }
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    ot_ival target = {0};
    target.kind = OTTER_TYPE_TENSOR;
    target.rank = (int)ns;
    target.dims = ot_inf_dims(n->cx, (int)ns);
    if (!target.dims) return OT_INF_NOMEM(n);
    for (int64_t i = 0; i < ns; i++) target.dims[i] = ot_data_to_dim(s[i]);
    if (!ot_in_has_shape(n, 0)) {
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    const ot_ival *shapes[2] = {x, &target};
    int rank;
    ot_idim *dims;
    OT_TRY(ot_broadcast(n, 2, shapes, &rank, &dims));
    return ot_out_shape(n, 0, dt, rank, dims);
}

/* ---- Shape, Size ---- */

otter_status ot_infer_shape(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    if (!ot_in_has_shape(n, 0)) {
        ot_out_shape(n, 0, OTTER_DTYPE_INT64, 1, NULL);
        return OTTER_OK;
    }
    int64_t start = 0, end = x->rank;
    if (n->opset >= 15) {
        start = ot_attr_int(n, "start", 0);
        end = ot_attr_int(n, "end", x->rank);
        if (start < 0) start += x->rank;
        if (end < 0) end += x->rank;
        start = clamp64(start, 0, x->rank);
        end = clamp64(end, 0, x->rank);
    }
    int64_t len = end > start ? end - start : 0;
    ot_idim d = ot_dim_known(len);
    OT_TRY(ot_out_shape(n, 0, OTTER_DTYPE_INT64, 1, &d));
    ot_idim *data = new_data(n, len);
    if (!data) return OT_INF_NOMEM(n);
    for (int64_t i = 0; i < len; i++) data[i] = ot_dim_to_data(x->dims[start + i]);
    return ot_out_idata(n, 0, len, data);
}

otter_status ot_infer_size(ot_inode *n) {
    OT_TRY(ot_out_shape(n, 0, OTTER_DTYPE_INT64, 0, NULL));
    const ot_ival *x = ot_in(n, 0);
    int64_t p;
    if (ot_in_has_shape(n, 0) && ot_dims_product(x->dims, x->rank, &p)) {
        ot_idim d = ot_dim_known(p);
        return ot_out_idata(n, 0, 1, &d);
    }
    return OTTER_OK;
}

/* ---- OneHot, NonZero, Compress, DepthToSpace, SpaceToDepth ---- */

otter_status ot_infer_one_hot(ot_inode *n) {
    const ot_ival *idx = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 2);
    if (!ot_in_has_shape(n, 0)) {
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    int r = idx->rank + 1;
    int64_t axis;
    OT_TRY(ot_norm_axis(n, ot_attr_int(n, "axis", -1), r, &axis));
    ot_idim *out = ot_inf_dims(n->cx, r);
    if (!out) return OT_INF_NOMEM(n);
    double *depth;
    int64_t nd;
    ot_idim dd = OT_DIM_UNKNOWN;
    if (ot_in_doubles(n, 1, &depth, &nd) && nd == 1) dd = ot_dim_known((int64_t)depth[0]);
    for (int i = 0, j = 0; i < r; i++) out[i] = i == axis ? dd : idx->dims[j++];
    return ot_out_shape(n, 0, dt, r, out);
}

otter_status ot_infer_non_zero(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    ot_idim d[2] = {OT_DIM_UNKNOWN, OT_DIM_UNKNOWN};
    if (ot_in_has_shape(n, 0)) d[0] = ot_dim_known(x->rank);
    return ot_out_shape(n, 0, OTTER_DTYPE_INT64, 2, d);
}

otter_status ot_infer_compress(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 0);
    const otter_attr *a = ot_attr(n, "axis");
    if (!a) return ot_out_shape(n, 0, dt, 1, NULL);
    if (!ot_in_has_shape(n, 0)) {
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    int64_t axis;
    OT_TRY(ot_norm_axis(n, a->i, x->rank, &axis));
    OT_TRY(ot_out_shape(n, 0, dt, x->rank, x->dims));
    n->out[0].dims[axis] = OT_DIM_UNKNOWN;
    return OTTER_OK;
}

static otter_status depth_space(ot_inode *n, bool to_space) {
    const ot_ival *x = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 0);
    if (!ot_in_has_shape(n, 0)) return ot_out_shape(n, 0, dt, 4, NULL);
    if (x->rank != 4) return ot_inf_fail(n, OTTER_ERR_INVALID, "input '%s' must have rank 4", n->node->inputs[0]);
    int64_t b = ot_attr_int(n, "blocksize", 0);
    if (b <= 0) return ot_inf_fail(n, OTTER_ERR_INVALID, "blocksize must be positive");
    ot_idim out[4] = {x->dims[0], OT_DIM_UNKNOWN, OT_DIM_UNKNOWN, OT_DIM_UNKNOWN};
    if (to_space) {
        if (x->dims[1].v >= 0) out[1] = ot_dim_known(x->dims[1].v / (b * b));
        for (int i = 2; i < 4; i++) out[i] = dim_mul(x->dims[i], ot_dim_known(b));
    } else {
        out[1] = dim_mul(x->dims[1], ot_dim_known(b * b));
        for (int i = 2; i < 4; i++)
            if (x->dims[i].v >= 0) out[i] = ot_dim_known(x->dims[i].v / b);
    }
    return ot_out_shape(n, 0, dt, 4, out);
}
otter_status ot_infer_depth_to_space(ot_inode *n) { return depth_space(n, true); }
otter_status ot_infer_space_to_depth(ot_inode *n) { return depth_space(n, false); }
