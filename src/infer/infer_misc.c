/* Shape inference: Constant, ConstantOfShape, Cast, CastLike, Range, Resize, Upsample, random
 * generators, EyeLike, and control flow (If, Loop, Scan). */
#include <math.h>
#include <string.h>

#include "infer/infer_internal.h"

/* ---- constants ---- */

otter_status ot_infer_constant(ot_inode *n) {
    if (n->n_out == 0) return OTTER_OK;
    const otter_attr *a;
    if ((a = ot_attr(n, "value")) && a->type == OTTER_ATTR_TENSOR && a->t) {
        OT_TRY(ot_ival_from_tensor(n->cx, a->t, &n->out[0]));
        if (n->cx->opts->no_data_prop) n->out[0].n_data = -1;
        return OTTER_OK;
    }
    if ((a = ot_attr(n, "value_int")) && a->type == OTTER_ATTR_INT) {
        OT_TRY(ot_out_shape(n, 0, OTTER_DTYPE_INT64, 0, NULL));
        ot_idim d = {a->i, NULL};
        return ot_out_idata(n, 0, 1, &d);
    }
    if ((a = ot_attr(n, "value_ints")) && a->type == OTTER_ATTR_INTS) {
        ot_idim len = ot_dim_known((int64_t)a->n_ints);
        OT_TRY(ot_out_shape(n, 0, OTTER_DTYPE_INT64, 1, &len));
        ot_idim *d = ot_inf_alloc(n->cx, sizeof(ot_idim) * (a->n_ints + 1));
        if (!d) return OT_INF_NOMEM(n);
        for (size_t i = 0; i < a->n_ints; i++) d[i] = (ot_idim){a->ints[i], NULL};
        return ot_out_idata(n, 0, (int64_t)a->n_ints, d);
    }
    if ((a = ot_attr(n, "value_float")) && a->type == OTTER_ATTR_FLOAT) {
        OT_TRY(ot_out_shape(n, 0, OTTER_DTYPE_FLOAT, 0, NULL));
        if (!n->cx->opts->no_data_prop) {
            n->out[0].fdata = ot_inf_alloc(n->cx, sizeof(double));
            if (!n->out[0].fdata) return OT_INF_NOMEM(n);
            n->out[0].fdata[0] = a->f;
            n->out[0].n_data = 1;
        }
        return OTTER_OK;
    }
    if ((a = ot_attr(n, "value_floats")) && a->type == OTTER_ATTR_FLOATS) {
        ot_idim len = ot_dim_known((int64_t)a->n_floats);
        return ot_out_shape(n, 0, OTTER_DTYPE_FLOAT, 1, &len);
    }
    if ((a = ot_attr(n, "value_string")) && a->type == OTTER_ATTR_STRING)
        return ot_out_shape(n, 0, OTTER_DTYPE_STRING, 0, NULL);
    if ((a = ot_attr(n, "value_strings")) && a->type == OTTER_ATTR_STRINGS) {
        ot_idim len = ot_dim_known((int64_t)a->n_strings);
        return ot_out_shape(n, 0, OTTER_DTYPE_STRING, 1, &len);
    }
    /* sparse_value: the dense shape is inside serialized bytes otter does not decode here */
    return OTTER_OK;
}

otter_status ot_infer_constant_of_shape(ot_inode *n) {
    otter_dtype dt = OTTER_DTYPE_FLOAT;
    const otter_attr *a = ot_attr(n, "value");
    const otter_tensor *val = a && a->type == OTTER_ATTR_TENSOR ? a->t : NULL;
    if (val) dt = val->dtype;
    const ot_idim *s;
    int64_t ns;
    if (!ot_in_ints(n, 0, &s, &ns)) {
        const ot_ival *sv = ot_in(n, 0);
        if (sv && sv->kind == OTTER_TYPE_TENSOR && sv->rank == 1 && sv->dims[0].v >= 0)
            return ot_out_shape(n, 0, dt, (int)sv->dims[0].v, NULL);
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    ot_idim *d = ot_inf_dims(n->cx, (int)ns);
    if (!d) return OT_INF_NOMEM(n);
    for (int64_t i = 0; i < ns; i++) {
        if (ot_data_is_value(s[i]) && s[i].v < 0)
            return ot_inf_fail(n, OTTER_ERR_INVALID, "shape entry %lld is negative (%lld)", (long long)i,
                               (long long)s[i].v);
        d[i] = ot_data_to_dim(s[i]);
    }
    OT_TRY(ot_out_shape(n, 0, dt, (int)ns, d));
    int64_t numel;
    bool int_dt = dt == OTTER_DTYPE_INT64 || dt == OTTER_DTYPE_INT32;
    if (ns <= 1 && ot_dims_product(d, (int)ns, &numel) && numel <= 4096 && (!val || int_dt)) {
        int64_t v = 0;
        if (val && val->data)
            v = dt == OTTER_DTYPE_INT64 ? ((const int64_t *)val->data)[0] : ((const int32_t *)val->data)[0];
        if (!val || int_dt) {
            if (!val) return OTTER_OK; /* float zeros: not tracked */
            ot_idim *data = ot_inf_alloc(n->cx, sizeof(ot_idim) * (size_t)(numel + 1));
            if (!data) return OT_INF_NOMEM(n);
            for (int64_t i = 0; i < numel; i++) data[i] = (ot_idim){v, NULL};
            return ot_out_idata(n, 0, numel, data);
        }
    }
    return OTTER_OK;
}

/* ---- casts ---- */

static bool dtype_is_integer(otter_dtype t) {
    return t == OTTER_DTYPE_INT64 || t == OTTER_DTYPE_INT32 || t == OTTER_DTYPE_INT16 || t == OTTER_DTYPE_INT8 ||
           t == OTTER_DTYPE_UINT8 || t == OTTER_DTYPE_UINT16 || t == OTTER_DTYPE_UINT32 || t == OTTER_DTYPE_UINT64;
}

static otter_status cast_to(ot_inode *n, otter_dtype to) {
    const ot_ival *x = ot_in(n, 0);
    if (ot_in_has_shape(n, 0))
        OT_TRY(ot_out_shape(n, 0, to, x->rank, x->dims));
    else
        ot_out_type(n, 0, to);
    if (!x || x->n_data < 0 || n->cx->opts->no_data_prop || n->n_out == 0) return OTTER_OK;
    /* values through integer casts (shape arithmetic often round-trips via int32 or float) */
    if (x->idata && (dtype_is_integer(to) || to == OTTER_DTYPE_BOOL) && dtype_is_integer(x->dtype)) {
        if (to == OTTER_DTYPE_BOOL) return OTTER_OK;
        return ot_out_idata(n, 0, x->n_data, x->idata);
    }
    if (x->fdata && dtype_is_integer(to)) {
        ot_idim *d = ot_inf_alloc(n->cx, sizeof(ot_idim) * (size_t)(x->n_data + 1));
        if (!d) return OT_INF_NOMEM(n);
        for (int64_t i = 0; i < x->n_data; i++) {
            double v = x->fdata[i];
            d[i] = isfinite(v) && fabs(v) < 9e18 ? (ot_idim){(int64_t)v, NULL} : (ot_idim){OT_DATA_UNKNOWN, NULL};
        }
        return ot_out_idata(n, 0, x->n_data, d);
    }
    if (x->idata && (to == OTTER_DTYPE_FLOAT || to == OTTER_DTYPE_DOUBLE)) {
        double *f = ot_inf_alloc(n->cx, sizeof(double) * (size_t)(x->n_data + 1));
        if (!f) return OT_INF_NOMEM(n);
        for (int64_t i = 0; i < x->n_data; i++) {
            if (!ot_data_is_value(x->idata[i])) return OTTER_OK;
            f[i] = (double)x->idata[i].v;
        }
        n->out[0].fdata = f;
        n->out[0].n_data = x->n_data;
    }
    return OTTER_OK;
}

otter_status ot_infer_cast(ot_inode *n) {
    const otter_attr *a = ot_attr(n, "to");
    if (!a || a->type != OTTER_ATTR_INT) {
        if (n->opset >= 6) return ot_inf_fail(n, OTTER_ERR_INVALID, "attribute 'to' is required");
        /* opset 1: 'to' is a string */
        const char *s = ot_attr_str(n, "to", NULL);
        otter_dtype t = s ? otter_dtype_from_name(s) : OTTER_DTYPE_UNDEFINED;
        return t == OTTER_DTYPE_UNDEFINED ? ot_out_like(n, 0, 0) : cast_to(n, t);
    }
    if (a->i <= 0 || a->i >= OTTER_DTYPE_COUNT_)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "attribute 'to' = %lld is not a supported element type",
                           (long long)a->i);
    return cast_to(n, (otter_dtype)a->i);
}

otter_status ot_infer_cast_like(ot_inode *n) { return cast_to(n, ot_in_dtype(n, 1)); }

/* BitCast: input 0's shape, type 'to' of the same bit width. */
otter_status ot_infer_bitcast(ot_inode *n) {
    const otter_attr *a = ot_attr(n, "to");
    if (!a || a->type != OTTER_ATTR_INT) return ot_inf_fail(n, OTTER_ERR_INVALID, "attribute 'to' is required");
    if (a->i <= 0 || a->i >= OTTER_DTYPE_COUNT_ || a->i == OTTER_DTYPE_STRING)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "attribute 'to' = %lld is not a non-string element type",
                           (long long)a->i);
    otter_dtype to = (otter_dtype)a->i, from = ot_in_dtype(n, 0);
    if (from == OTTER_DTYPE_STRING || (from != OTTER_DTYPE_UNDEFINED && otter_dtype_bits(from) != otter_dtype_bits(to)))
        return ot_inf_fail(n, OTTER_ERR_INVALID, "input type %s (%d bits) can't be reinterpreted as %s (%d bits)",
                           otter_dtype_name(from), otter_dtype_bits(from), otter_dtype_name(to), otter_dtype_bits(to));
    const ot_ival *x = ot_in(n, 0);
    if (ot_in_has_shape(n, 0)) return ot_out_shape(n, 0, to, x->rank, x->dims);
    ot_out_type(n, 0, to);
    return OTTER_OK;
}

/* ---- Range ---- */

otter_status ot_infer_range(ot_inode *n) {
    OT_TRY(ot_same_dtype(n, 0, 2));
    otter_dtype dt = ot_in_dtype(n, 0);
    double *s, *l, *d;
    int64_t c0, c1, c2;
    if (!ot_in_doubles(n, 0, &s, &c0) || !ot_in_doubles(n, 1, &l, &c1) || !ot_in_doubles(n, 2, &d, &c2) || c0 != 1 ||
        c1 != 1 || c2 != 1)
        return ot_out_shape(n, 0, dt, 1, NULL);
    if (d[0] == 0) return ot_inf_fail(n, OTTER_ERR_INVALID, "delta is 0");
    double cnt = ceil((l[0] - s[0]) / d[0]);
    int64_t len = cnt > 0 ? (int64_t)cnt : 0;
    ot_idim dim = ot_dim_known(len);
    OT_TRY(ot_out_shape(n, 0, dt, 1, &dim));
    if (dtype_is_integer(dt) && len <= 4096) {
        ot_idim *data = ot_inf_alloc(n->cx, sizeof(ot_idim) * (size_t)(len + 1));
        if (!data) return OT_INF_NOMEM(n);
        for (int64_t i = 0; i < len; i++) data[i] = (ot_idim){(int64_t)s[0] + i * (int64_t)d[0], NULL};
        return ot_out_idata(n, 0, len, data);
    }
    return OTTER_OK;
}

/* ---- Resize, Upsample ---- */

static otter_status resize_scaled(ot_inode *n, const ot_ival *x, otter_dtype dt, const double *scales, int64_t ns,
                                  const int64_t *axes) {
    int64_t want = axes ? ns : x->rank;
    if (ns != want)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "scales has %lld entries for input '%s' of rank %d", (long long)ns,
                           n->node->inputs[0], x->rank);
    OT_TRY(ot_out_shape(n, 0, dt, x->rank, x->dims));
    for (int64_t i = 0; i < ns; i++) {
        int64_t a = i;
        if (axes) OT_TRY(ot_norm_axis(n, axes[i], x->rank, &a));
        ot_idim d = x->dims[a];
        if (d.v >= 0)
            n->out[0].dims[a] = ot_dim_known((int64_t)floorf((float)d.v * (float)scales[i]));
        else if (scales[i] != 1.0)
            n->out[0].dims[a] = OT_DIM_UNKNOWN;
    }
    return OTTER_OK;
}

otter_status ot_infer_resize(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 0);
    if (!ot_in_has_shape(n, 0)) {
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    const int64_t *axes = NULL;
    size_t na = 0;
    if (n->opset >= 18) ot_attr_ints(n, "axes", &axes, &na);
    double *scales;
    int64_t ns;
    if (n->opset < 11) {
        if (ot_in_doubles(n, 1, &scales, &ns)) return resize_scaled(n, x, dt, scales, ns, NULL);
        return ot_out_shape(n, 0, dt, x->rank, NULL);
    }
    int64_t *sizes, nz;
    if (ot_in(n, 3) && ot_in_int64s(n, 3, &sizes, &nz)) {
        int64_t want = axes ? (int64_t)na : x->rank;
        if (nz != want)
            return ot_inf_fail(n, OTTER_ERR_INVALID, "sizes has %lld entries, expected %lld", (long long)nz,
                               (long long)want);
        OT_TRY(ot_out_shape(n, 0, dt, x->rank, x->dims));
        const char *policy = ot_attr_str(n, "keep_aspect_ratio_policy", "stretch");
        bool keep = n->opset >= 18 && strcmp(policy, "stretch") != 0;
        double scale = strcmp(policy, "not_larger") == 0 ? INFINITY : -INFINITY;
        if (keep) {
            for (int64_t i = 0; i < nz; i++) {
                int64_t a = axes ? axes[i] : i;
                if (a < 0) a += x->rank;
                if (a < 0 || a >= x->rank || x->dims[a].v <= 0) return ot_out_shape(n, 0, dt, x->rank, NULL);
                double s = (double)sizes[i] / (double)x->dims[a].v;
                scale = strcmp(policy, "not_larger") == 0 ? fmin(scale, s) : fmax(scale, s);
            }
        }
        for (int64_t i = 0; i < nz; i++) {
            int64_t a = i;
            if (axes) OT_TRY(ot_norm_axis(n, axes[i], x->rank, &a));
            n->out[0].dims[a] =
                keep ? ot_dim_known((int64_t)floor(scale * (double)x->dims[a].v + 0.5)) : ot_dim_known(sizes[i]);
        }
        return OTTER_OK;
    }
    const ot_ival *sc = ot_in(n, 2);
    if (sc && ot_in_doubles(n, 2, &scales, &ns) && ns > 0) {
        const int64_t *ax = axes;
        return resize_scaled(n, x, dt, scales, ns, ax);
    }
    return ot_out_shape(n, 0, dt, x->rank, NULL);
}

otter_status ot_infer_upsample(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 0);
    if (!ot_in_has_shape(n, 0)) {
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    double *scales;
    int64_t ns;
    if (n->opset >= 9) {
        if (ot_in_doubles(n, 1, &scales, &ns)) return resize_scaled(n, x, dt, scales, ns, NULL);
        return ot_out_shape(n, 0, dt, x->rank, NULL);
    }
    const otter_attr *a = ot_attr(n, "scales");
    if (!a || a->type != OTTER_ATTR_FLOATS) return ot_out_shape(n, 0, dt, x->rank, NULL);
    double *s = ot_inf_alloc(n->cx, sizeof(double) * (a->n_floats + 1));
    if (!s) return OT_INF_NOMEM(n);
    for (size_t i = 0; i < a->n_floats; i++) s[i] = a->floats[i];
    return resize_scaled(n, x, dt, s, (int64_t)a->n_floats, NULL);
}

/* ---- generators ---- */

otter_status ot_infer_random_gen(ot_inode *n) {
    otter_dtype dt = (otter_dtype)ot_attr_int(n, "dtype", OTTER_DTYPE_FLOAT);
    const int64_t *s;
    size_t c;
    if (!ot_attr_ints(n, "shape", &s, &c)) {
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    ot_idim *d = ot_inf_dims(n->cx, (int)c);
    if (!d) return OT_INF_NOMEM(n);
    for (size_t i = 0; i < c; i++) d[i] = s[i] >= 0 ? ot_dim_known(s[i]) : OT_DIM_UNKNOWN;
    return ot_out_shape(n, 0, dt, (int)c, d);
}

/* RandomNormalLike, RandomUniformLike, EyeLike, Bernoulli: input's shape, dtype attribute or input's. */
otter_status ot_infer_like_with_dtype(ot_inode *n) {
    OT_TRY(ot_out_like(n, 0, 0));
    const otter_attr *a = ot_attr(n, "dtype");
    if (a && a->type == OTTER_ATTR_INT && n->n_out > 0) {
        n->out[0].kind = OTTER_TYPE_TENSOR;
        n->out[0].dtype = (otter_dtype)a->i;
    }
    return OTTER_OK;
}

/* ---- control flow ---- */

static const otter_attr *graph_attr(const ot_inode *n, const char *name) {
    const otter_attr *a = ot_attr(n, name);
    return a && a->type == OTTER_ATTR_GRAPH && a->g ? a : NULL;
}

/* Union of two shapes (as onnx's UnionShapeInfo): equal dims stay, others become unknown. */
static void union_into(ot_ival *acc, const ot_ival *b) {
    if (acc->kind != OTTER_TYPE_TENSOR || b->kind != OTTER_TYPE_TENSOR) return;
    if (acc->rank < 0) return;
    if (b->rank != acc->rank) {
        acc->rank = -1;
        acc->dims = NULL;
        return;
    }
    for (int i = 0; i < acc->rank; i++)
        if (!ot_dim_equal(acc->dims[i], b->dims[i])) acc->dims[i] = OT_DIM_UNKNOWN;
}

otter_status ot_infer_if(ot_inode *n) {
    const otter_attr *t = graph_attr(n, "then_branch"), *e = graph_attr(n, "else_branch");
    if (!t || !e) return ot_inf_fail(n, OTTER_ERR_INVALID, "attributes 'then_branch' and 'else_branch' are required");
    ot_ival *to = ot_inf_alloc(n->cx, sizeof(ot_ival) * (n->n_out + 1));
    ot_ival *eo = ot_inf_alloc(n->cx, sizeof(ot_ival) * (n->n_out + 1));
    if (!to || !eo) return OT_INF_NOMEM(n);
    for (size_t i = 0; i < n->n_out; i++) to[i].rank = eo[i].rank = -1, to[i].n_data = eo[i].n_data = -1;
    if (t->g->n_outputs != n->n_out || e->g->n_outputs != n->n_out)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "branches have %zu and %zu outputs but the node has %zu",
                           t->g->n_outputs, e->g->n_outputs, n->n_out);
    OT_TRY(ot_infer_subgraph(n, t->g, 0, NULL, to, n->n_out));
    OT_TRY(ot_infer_subgraph(n, e->g, 0, NULL, eo, n->n_out));
    for (size_t i = 0; i < n->n_out; i++) {
        ot_ival *a = &to[i], *b = &eo[i];
        if (a->kind == OTTER_TYPE_NONE) {
            a = b;
            b = &to[i];
        }
        if (a->kind == OTTER_TYPE_TENSOR && b->kind == OTTER_TYPE_TENSOR && a->dtype != OTTER_DTYPE_UNDEFINED &&
            b->dtype != OTTER_DTYPE_UNDEFINED && a->dtype != b->dtype)
            return ot_inf_fail(n, OTTER_ERR_INVALID, "output %zu: then_branch gives %s but else_branch gives %s", i,
                               otter_dtype_name(a->dtype), otter_dtype_name(b->dtype));
        OT_TRY(ot_ival_copy(n->cx, &n->out[i], a));
        n->out[i].n_data = -1;
        n->out[i].idata = NULL;
        n->out[i].fdata = NULL;
        if (b->kind == OTTER_TYPE_TENSOR)
            union_into(&n->out[i], b);
        else if (n->out[i].kind == OTTER_TYPE_TENSOR)
            n->out[i].rank = -1;
    }
    return OTTER_OK;
}

/* A tensor record with only the element type (shape dropped). */
static ot_ival *type_only(ot_inode *n, const ot_ival *v, otter_dtype fallback, int rank) {
    ot_ival *r = ot_inf_alloc(n->cx, sizeof *r);
    if (!r) return NULL;
    r->kind = OTTER_TYPE_TENSOR;
    r->dtype = v && v->kind == OTTER_TYPE_TENSOR ? v->dtype : fallback;
    r->rank = rank;
    r->dims = NULL;
    r->n_data = -1;
    if (v && v->kind != OTTER_TYPE_TENSOR && v->kind != OTTER_TYPE_NONE) {
        r->kind = v->kind;
        r->other = v->other;
    }
    return r;
}

otter_status ot_infer_loop(ot_inode *n) {
    const otter_attr *b = graph_attr(n, "body");
    if (!b) return ot_inf_fail(n, OTTER_ERR_INVALID, "attribute 'body' is required");
    otter_graph *g = b->g;
    size_t n_carried = n->n_in >= 2 ? n->n_in - 2 : 0;
    if (g->n_inputs != n_carried + 2)
        return ot_inf_fail(n, OTTER_ERR_INVALID,
                           "body has %zu inputs, expected %zu (iteration, condition, %zu carried)", g->n_inputs,
                           n_carried + 2, n_carried);
    if (g->n_outputs < n_carried + 1)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "body has %zu outputs, expected at least %zu", g->n_outputs,
                           n_carried + 1);
    const ot_ival **given = ot_inf_alloc(n->cx, sizeof(ot_ival *) * (g->n_inputs + 1));
    ot_ival *outs = ot_inf_alloc(n->cx, sizeof(ot_ival) * (g->n_outputs + 1));
    if (!given || !outs) return OT_INF_NOMEM(n);
    given[0] = type_only(n, NULL, OTTER_DTYPE_INT64, 0);
    given[1] = type_only(n, NULL, OTTER_DTYPE_BOOL, 0);
    for (size_t i = 0; i < n_carried; i++) {
        /* carried values may change shape between iterations: pass the element type only */
        const ot_ival *v = ot_in(n, 2 + i);
        given[2 + i] = type_only(n, v, OTTER_DTYPE_UNDEFINED, -1);
        if (!given[2 + i]) return OT_INF_NOMEM(n);
        if (v && v->kind == OTTER_TYPE_NONE) given[2 + i] = NULL;
    }
    if (!given[0] || !given[1]) return OT_INF_NOMEM(n);
    for (size_t i = 0; i < g->n_outputs; i++) outs[i].rank = -1, outs[i].n_data = -1;
    OT_TRY(ot_infer_subgraph(n, g, g->n_inputs, given, outs, g->n_outputs));
    for (size_t i = 0; i < n->n_out; i++) {
        size_t bi = i + 1;
        if (bi >= g->n_outputs) break;
        const ot_ival *o = &outs[bi];
        if (i < n_carried) {
            OT_TRY(ot_ival_copy(n->cx, &n->out[i], o));
            n->out[i].n_data = -1;
            n->out[i].idata = NULL;
            n->out[i].fdata = NULL;
            const ot_ival *init = ot_in(n, 2 + i);
            if (init && init->kind == OTTER_TYPE_TENSOR) union_into(&n->out[i], init);
        } else if (o->kind == OTTER_TYPE_TENSOR) {
            if (o->rank < 0) {
                ot_out_type(n, i, o->dtype);
                continue;
            }
            OT_TRY(ot_out_shape(n, i, o->dtype, o->rank + 1, NULL));
            for (int k = 0; k < o->rank; k++) n->out[i].dims[k + 1] = o->dims[k];
        }
    }
    return OTTER_OK;
}

otter_status ot_infer_scan(ot_inode *n) {
    const otter_attr *b = graph_attr(n, "body");
    if (!b) return ot_inf_fail(n, OTTER_ERR_INVALID, "attribute 'body' is required");
    if (n->opset < 9) return OTTER_OK; /* Scan-8 (batched, sequence_lens): types only from the body */
    otter_graph *g = b->g;
    int64_t m = ot_attr_int(n, "num_scan_inputs", 0);
    if (m < 0 || (size_t)m > n->n_in) return ot_inf_fail(n, OTTER_ERR_INVALID, "num_scan_inputs is %lld", (long long)m);
    size_t n_state = n->n_in - (size_t)m;
    if (g->n_inputs != n->n_in)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "body has %zu inputs but the node has %zu", g->n_inputs, n->n_in);
    const int64_t *in_axes = NULL, *out_axes = NULL;
    size_t n_in_axes = 0, n_out_axes = 0;
    ot_attr_ints(n, "scan_input_axes", &in_axes, &n_in_axes);
    ot_attr_ints(n, "scan_output_axes", &out_axes, &n_out_axes);
    const ot_ival **given = ot_inf_alloc(n->cx, sizeof(ot_ival *) * (g->n_inputs + 1));
    ot_ival *outs = ot_inf_alloc(n->cx, sizeof(ot_ival) * (g->n_outputs + 1));
    if (!given || !outs) return OT_INF_NOMEM(n);
    ot_idim seq = OT_DIM_UNKNOWN;
    for (size_t i = 0; i < n->n_in; i++) {
        const ot_ival *v = ot_in(n, i);
        if (!v || v->kind != OTTER_TYPE_TENSOR) continue;
        if (i < n_state) {
            given[i] = v;
            continue;
        }
        if (v->rank < 0) {
            given[i] = type_only(n, v, OTTER_DTYPE_UNDEFINED, -1);
            if (!given[i]) return OT_INF_NOMEM(n);
            continue;
        }
        int64_t ax = i - n_state < n_in_axes ? in_axes[i - n_state] : 0;
        OT_TRY(ot_norm_axis(n, ax, v->rank, &ax));
        seq = v->dims[ax];
        ot_ival *s = type_only(n, v, OTTER_DTYPE_UNDEFINED, v->rank - 1);
        if (!s) return OT_INF_NOMEM(n);
        s->dims = ot_inf_dims(n->cx, v->rank - 1);
        if (!s->dims) return OT_INF_NOMEM(n);
        for (int k = 0, j = 0; k < v->rank; k++)
            if (k != ax) s->dims[j++] = v->dims[k];
        given[i] = s;
    }
    for (size_t i = 0; i < g->n_outputs; i++) outs[i].rank = -1, outs[i].n_data = -1;
    OT_TRY(ot_infer_subgraph(n, g, g->n_inputs, given, outs, g->n_outputs));
    for (size_t i = 0; i < n->n_out && i < g->n_outputs; i++) {
        const ot_ival *o = &outs[i];
        if (i < n_state) {
            OT_TRY(ot_ival_copy(n->cx, &n->out[i], o));
            n->out[i].n_data = -1;
            n->out[i].idata = NULL;
            n->out[i].fdata = NULL;
            continue;
        }
        if (o->kind != OTTER_TYPE_TENSOR) continue;
        if (o->rank < 0) {
            ot_out_type(n, i, o->dtype);
            continue;
        }
        int r = o->rank + 1;
        int64_t ax = i - n_state < n_out_axes ? out_axes[i - n_state] : 0;
        OT_TRY(ot_norm_axis(n, ax, r, &ax));
        OT_TRY(ot_out_shape(n, i, o->dtype, r, NULL));
        for (int k = 0, j = 0; k < r; k++) n->out[i].dims[k] = k == ax ? seq : o->dims[j++];
    }
    return OTTER_OK;
}
