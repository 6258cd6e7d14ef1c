/* Shape inference driver: scopes, the walk over nodes, merging with declared types, writing
 * value_info, and the helpers every rule family shares. */
#include <stdarg.h>
#include <string.h>

#include "infer/infer_internal.h"
#include "ops/shape_math.h"

/* ---- arena -------------------------------------------------------------------------------- */

struct ot_arena_block {
    ot_arena_block *next;
    size_t used, cap;
    max_align_t data[];
};

void *ot_inf_alloc(ot_infer *cx, size_t n) {
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (n == 0) n = sizeof(max_align_t);
    ot_arena_block *b = cx->arena;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        b = ot_malloc(sizeof(ot_arena_block) + cap);
        if (!b) return NULL;
        b->next = cx->arena;
        b->used = 0;
        b->cap = cap;
        cx->arena = b;
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

static void arena_free(ot_infer *cx) {
    while (cx->arena) {
        ot_arena_block *next = cx->arena->next;
        ot_free(cx->arena);
        cx->arena = next;
    }
}

ot_idim *ot_inf_dims(ot_infer *cx, int n) {
    ot_idim *d = ot_inf_alloc(cx, sizeof(ot_idim) * (size_t)(n > 0 ? n : 1));
    if (!d) return NULL;
    for (int i = 0; i < n; i++) d[i] = OT_DIM_UNKNOWN;
    return d;
}

static const char *arena_strdup(ot_infer *cx, const char *s) {
    if (!s) return NULL;
    size_t len = strlen(s);
    char *p = ot_inf_alloc(cx, len + 1);
    if (p) memcpy(p, s, len + 1);
    return p;
}

/* ---- scopes: name -> value record, chained to the enclosing graph's scope ----------------- */

typedef struct scope_entry {
    const char *name;
    ot_ival *val;
} scope_entry;

struct ot_scope {
    ot_scope *parent;
    size_t n, cap; /* cap is a power of two */
    scope_entry *slots;
};

static ot_ival **scope_slot(ot_scope *sc, const char *name) {
    size_t mask = sc->cap - 1;
    for (size_t i = ot_hash_str(name) & mask;; i = (i + 1) & mask) {
        if (!sc->slots[i].name || strcmp(sc->slots[i].name, name) == 0) {
            sc->slots[i].name = sc->slots[i].name ? sc->slots[i].name : name;
            return &sc->slots[i].val;
        }
    }
}

static ot_ival *scope_get_local(const ot_scope *sc, const char *name) {
    if (sc->cap == 0) return NULL;
    size_t mask = sc->cap - 1;
    for (size_t i = ot_hash_str(name) & mask; sc->slots[i].name; i = (i + 1) & mask)
        if (strcmp(sc->slots[i].name, name) == 0) return sc->slots[i].val;
    return NULL;
}

static ot_ival *scope_get(const ot_scope *sc, const char *name) {
    for (; sc; sc = sc->parent) {
        ot_ival *v = scope_get_local(sc, name);
        if (v) return v;
    }
    return NULL;
}

/* Names must outlive the scope (IR strings do: the graph is not edited during a run, except
 * value_info, whose names we never key on). */
static otter_status scope_put(ot_infer *cx, ot_scope *sc, const char *name, ot_ival *v) {
    if ((sc->n + 1) * 2 > sc->cap) {
        size_t cap = sc->cap ? sc->cap * 2 : 64;
        scope_entry *old = sc->slots;
        size_t old_cap = sc->cap;
        sc->slots = ot_inf_alloc(cx, sizeof(scope_entry) * cap);
        if (!sc->slots) return OT_NOMEM();
        sc->cap = cap;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i].name) *scope_slot(sc, old[i].name) = old[i].val;
    }
    ot_ival **slot = scope_slot(sc, name);
    if (!*slot) sc->n++;
    *slot = v;
    return OTTER_OK;
}

/* ---- value records ------------------------------------------------------------------------ */

static const ot_ival unknown_ival = {OTTER_TYPE_NONE, OTTER_DTYPE_UNDEFINED, -1, NULL, NULL, -1, NULL, NULL};

static ot_ival *ival_new(ot_infer *cx) {
    ot_ival *v = ot_inf_alloc(cx, sizeof *v);
    if (v) *v = unknown_ival;
    return v;
}

otter_status ot_ival_copy(ot_infer *cx, ot_ival *dst, const ot_ival *src) {
    *dst = *src;
    if (src->rank > 0) {
        dst->dims = ot_inf_dims(cx, src->rank);
        if (!dst->dims) return OT_NOMEM();
        memcpy(dst->dims, src->dims, sizeof(ot_idim) * (size_t)src->rank);
    }
    if (src->n_data >= 0 && src->idata) {
        dst->idata = ot_inf_alloc(cx, sizeof(ot_idim) * (size_t)(src->n_data + 1));
        if (!dst->idata) return OT_NOMEM();
        memcpy(dst->idata, src->idata, sizeof(ot_idim) * (size_t)src->n_data);
    }
    if (src->n_data >= 0 && src->fdata) {
        dst->fdata = ot_inf_alloc(cx, sizeof(double) * (size_t)(src->n_data + 1));
        if (!dst->fdata) return OT_NOMEM();
        memcpy(dst->fdata, src->fdata, sizeof(double) * (size_t)src->n_data);
    }
    return OTTER_OK;
}

/* A declared type (value_info, graph input/output) as a record. */
static otter_status ival_from_type(ot_infer *cx, const otter_type *t, ot_ival *v) {
    *v = unknown_ival;
    if (!t || t->kind == OTTER_TYPE_NONE) return OTTER_OK;
    if (t->kind != OTTER_TYPE_TENSOR) {
        v->kind = t->kind;
        v->other = t;
        return OTTER_OK;
    }
    v->kind = OTTER_TYPE_TENSOR;
    v->dtype = t->has_elem_type ? t->elem_type : OTTER_DTYPE_UNDEFINED;
    v->rank = t->rank;
    if (t->rank > 0) {
        v->dims = ot_inf_dims(cx, t->rank);
        if (!v->dims) return OT_NOMEM();
        for (int i = 0; i < t->rank; i++) {
            if (t->dims[i].value >= 0)
                v->dims[i] = ot_dim_known(t->dims[i].value);
            else if (t->dims[i].param && t->dims[i].param[0])
                v->dims[i].param = t->dims[i].param;
        }
    }
    return OTTER_OK;
}

#define MAX_KNOWN_ELEMS 4096

static bool dtype_is_int(otter_dtype t) {
    switch (t) {
    case OTTER_DTYPE_UINT8:
    case OTTER_DTYPE_INT8:
    case OTTER_DTYPE_UINT16:
    case OTTER_DTYPE_INT16:
    case OTTER_DTYPE_INT32:
    case OTTER_DTYPE_INT64:
    case OTTER_DTYPE_UINT32:
    case OTTER_DTYPE_UINT64:
    case OTTER_DTYPE_BOOL:
        return true;
    default:
        return false;
    }
}

static int64_t read_int(const void *data, otter_dtype t, int64_t i) {
    switch (t) {
    case OTTER_DTYPE_UINT8:
        return ((const uint8_t *)data)[i];
    case OTTER_DTYPE_INT8:
        return ((const int8_t *)data)[i];
    case OTTER_DTYPE_UINT16:
        return ((const uint16_t *)data)[i];
    case OTTER_DTYPE_INT16:
        return ((const int16_t *)data)[i];
    case OTTER_DTYPE_INT32:
        return ((const int32_t *)data)[i];
    case OTTER_DTYPE_INT64:
        return ((const int64_t *)data)[i];
    case OTTER_DTYPE_UINT32:
        return ((const uint32_t *)data)[i];
    case OTTER_DTYPE_UINT64:
        return (int64_t)((const uint64_t *)data)[i];
    case OTTER_DTYPE_BOOL:
        return ((const uint8_t *)data)[i] != 0;
    default:
        return 0;
    }
}

otter_status ot_ival_from_tensor(ot_infer *cx, const otter_tensor *t, ot_ival *v) {
    *v = unknown_ival;
    v->kind = OTTER_TYPE_TENSOR;
    v->dtype = t->dtype;
    v->rank = t->rank;
    v->dims = ot_inf_dims(cx, t->rank);
    if (!v->dims) return OT_NOMEM();
    for (int i = 0; i < t->rank; i++) v->dims[i] = ot_dim_known(t->dims[i]);
    int64_t numel = otter_tensor_numel(t);
    if (t->rank > 1 || numel > MAX_KNOWN_ELEMS || (numel > 0 && !t->data)) return OTTER_OK;
    if (dtype_is_int(t->dtype)) {
        v->idata = ot_inf_alloc(cx, sizeof(ot_idim) * (size_t)(numel + 1));
        if (!v->idata) return OT_NOMEM();
        for (int64_t i = 0; i < numel; i++) {
            int64_t x = read_int(t->data, t->dtype, i);
            v->idata[i] = (ot_idim){x == OT_DATA_UNKNOWN ? OT_DATA_UNKNOWN + 1 : x, NULL};
        }
        v->n_data = numel;
    } else if (t->dtype == OTTER_DTYPE_FLOAT || t->dtype == OTTER_DTYPE_DOUBLE) {
        v->fdata = ot_inf_alloc(cx, sizeof(double) * (size_t)(numel + 1));
        if (!v->fdata) return OT_NOMEM();
        for (int64_t i = 0; i < numel; i++)
            v->fdata[i] = t->dtype == OTTER_DTYPE_FLOAT ? ((const float *)t->data)[i] : ((const double *)t->data)[i];
        v->n_data = numel;
    }
    return OTTER_OK;
}

/* ---- errors, inputs, attributes ------------------------------------------------------------- */

otter_status ot_inf_fail(const ot_inode *n, otter_status s, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ot_error(s, "shape inference: node '%s' (%s): %s", n->node->name ? n->node->name : "",
                    n->node->op_type ? n->node->op_type : "", msg);
}

bool ot_in_ints(const ot_inode *n, size_t i, const ot_idim **vals, int64_t *count) {
    const ot_ival *v = ot_in(n, i);
    if (!v || v->n_data < 0 || !v->idata) return false;
    *vals = v->idata;
    *count = v->n_data;
    return true;
}

bool ot_in_int64s(const ot_inode *n, size_t i, int64_t **vals, int64_t *count) {
    const ot_idim *d;
    int64_t c;
    if (!ot_in_ints(n, i, &d, &c)) return false;
    int64_t *out = ot_inf_alloc(n->cx, sizeof(int64_t) * (size_t)(c + 1));
    if (!out) return false;
    for (int64_t k = 0; k < c; k++) {
        if (!ot_data_is_value(d[k])) return false;
        out[k] = d[k].v;
    }
    *vals = out;
    *count = c;
    return true;
}

bool ot_in_doubles(const ot_inode *n, size_t i, double **vals, int64_t *count) {
    const ot_ival *v = ot_in(n, i);
    if (!v || v->n_data < 0) return false;
    if (v->fdata) {
        *vals = v->fdata;
        *count = v->n_data;
        return true;
    }
    int64_t *iv;
    int64_t c;
    if (!ot_in_int64s(n, i, &iv, &c)) return false;
    double *out = ot_inf_alloc(n->cx, sizeof(double) * (size_t)(c + 1));
    if (!out) return false;
    for (int64_t k = 0; k < c; k++) out[k] = (double)iv[k];
    *vals = out;
    *count = c;
    return true;
}

const otter_attr *ot_attr(const ot_inode *n, const char *name) {
    for (size_t i = 0; i < n->node->n_attrs; i++)
        if (ot_streq(n->node->attrs[i].name, name)) return &n->node->attrs[i];
    return NULL;
}

int64_t ot_attr_int(const ot_inode *n, const char *name, int64_t def) {
    const otter_attr *a = ot_attr(n, name);
    return a && a->type == OTTER_ATTR_INT ? a->i : def;
}

float ot_attr_float(const ot_inode *n, const char *name, float def) {
    const otter_attr *a = ot_attr(n, name);
    return a && a->type == OTTER_ATTR_FLOAT ? a->f : def;
}

bool ot_attr_ints(const ot_inode *n, const char *name, const int64_t **vals, size_t *count) {
    const otter_attr *a = ot_attr(n, name);
    if (!a || a->type != OTTER_ATTR_INTS) return false;
    *vals = a->ints;
    *count = a->n_ints;
    return true;
}

const char *ot_attr_str(const ot_inode *n, const char *name, const char *def) {
    const otter_attr *a = ot_attr(n, name);
    return a && a->type == OTTER_ATTR_STRING && a->s.data ? a->s.data : def;
}

otter_status ot_norm_axis(const ot_inode *n, int64_t axis, int rank, int64_t *out) {
    if (axis < -(int64_t)rank || axis >= rank)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "axis %lld is out of range for rank %d", (long long)axis, rank);
    *out = axis < 0 ? axis + rank : axis;
    return OTTER_OK;
}

/* ---- outputs ------------------------------------------------------------------------------ */

void ot_out_type(ot_inode *n, size_t i, otter_dtype dt) {
    if (i >= n->n_out) return;
    n->out[i].kind = OTTER_TYPE_TENSOR;
    n->out[i].dtype = dt;
}

otter_status ot_out_shape(ot_inode *n, size_t i, otter_dtype dt, int rank, const ot_idim *dims) {
    if (i >= n->n_out) return OTTER_OK;
    ot_ival *o = &n->out[i];
    o->kind = OTTER_TYPE_TENSOR;
    o->dtype = dt;
    o->rank = rank;
    o->dims = NULL;
    if (rank >= 0) {
        o->dims = ot_inf_dims(n->cx, rank);
        if (!o->dims) return OT_INF_NOMEM(n);
        if (dims) memcpy(o->dims, dims, sizeof(ot_idim) * (size_t)rank);
        for (int k = 0; k < rank; k++)
            if (o->dims[k].v < 0 && !o->dims[k].param) o->dims[k].v = -1;
    }
    return OTTER_OK;
}

otter_status ot_out_like(ot_inode *n, size_t i, size_t j) {
    const ot_ival *v = ot_in(n, j);
    if (i >= n->n_out || !v) return OTTER_OK;
    if (v->kind != OTTER_TYPE_TENSOR) {
        if (v->kind != OTTER_TYPE_NONE) {
            n->out[i].kind = v->kind;
            n->out[i].other = v->other;
        }
        return OTTER_OK;
    }
    return ot_out_shape(n, i, v->dtype, v->rank, v->dims);
}

otter_status ot_out_idata(ot_inode *n, size_t i, int64_t count, const ot_idim *vals) {
    if (i >= n->n_out || n->cx->opts->no_data_prop) return OTTER_OK;
    ot_ival *o = &n->out[i];
    o->idata = ot_inf_alloc(n->cx, sizeof(ot_idim) * (size_t)(count + 1));
    if (!o->idata) return OT_INF_NOMEM(n);
    memcpy(o->idata, vals, sizeof(ot_idim) * (size_t)count);
    o->n_data = count;
    return OTTER_OK;
}

/* ---- shared shape helpers ---------------------------------------------------------------- */

bool ot_dim_equal(ot_idim a, ot_idim b) {
    if (a.v >= 0 || b.v >= 0) return a.v == b.v;
    return a.param && b.param && strcmp(a.param, b.param) == 0;
}

bool ot_dims_product(const ot_idim *d, int rank, int64_t *out) {
    int64_t p = 1;
    for (int i = 0; i < rank; i++) {
        if (d[i].v < 0) return false;
        p *= d[i].v;
    }
    *out = p;
    return true;
}

otter_status ot_broadcast(ot_inode *n, size_t n_shapes, const ot_ival *const *shapes, int *rank, ot_idim **dims) {
    int r = 0;
    *rank = -1;
    *dims = NULL;
    for (size_t j = 0; j < n_shapes; j++) {
        if (!shapes[j] || shapes[j]->kind != OTTER_TYPE_TENSOR || shapes[j]->rank < 0) return OTTER_OK;
        if (shapes[j]->rank > r) r = shapes[j]->rank;
    }
    ot_idim *out = ot_inf_dims(n->cx, r);
    if (!out) return OT_INF_NOMEM(n);
    for (int i = 0; i < r; i++) {
        int64_t value = 1;
        ot_idim sym = OT_DIM_UNKNOWN;
        int n_sym = 0;
        bool same_param = true;
        for (size_t j = 0; j < n_shapes; j++) {
            int rj = shapes[j]->rank;
            if (i < r - rj) continue;
            ot_idim d = shapes[j]->dims[i - (r - rj)];
            if (d.v >= 0) {
                if (!ot_broadcast_dim(value, d.v, &value))
                    return ot_inf_fail(n, OTTER_ERR_INVALID,
                                       "input shapes do not broadcast: dimension %d is %lld in one input and "
                                       "%lld in input %zu ('%s')",
                                       i, (long long)value, (long long)d.v, j,
                                       j < n->node->n_inputs ? n->node->inputs[j] : "");
            } else {
                if (n_sym == 0)
                    sym = d;
                else if (!(d.param && sym.param && strcmp(d.param, sym.param) == 0))
                    same_param = false;
                n_sym++;
            }
        }
        if (value != 1 || n_sym == 0)
            out[i] = ot_dim_known(value);
        else if (n_sym == 1 || same_param)
            out[i] = sym;
    }
    *rank = r;
    *dims = out;
    return OTTER_OK;
}

otter_status ot_same_dtype(const ot_inode *n, size_t first, size_t last) {
    otter_dtype t = OTTER_DTYPE_UNDEFINED;
    size_t at = 0;
    for (size_t i = first; i <= last && i < n->n_in; i++) {
        otter_dtype d = ot_in_dtype(n, i);
        if (d == OTTER_DTYPE_UNDEFINED) continue;
        if (t == OTTER_DTYPE_UNDEFINED) {
            t = d;
            at = i;
        } else if (d != t) {
            return ot_inf_fail(n, OTTER_ERR_INVALID,
                               "input %zu '%s' has element type %s but input %zu '%s' has %s (they must match)", i,
                               n->node->inputs[i], otter_dtype_name(d), at, n->node->inputs[at], otter_dtype_name(t));
        }
    }
    return OTTER_OK;
}

/* ---- rules -------------------------------------------------------------------------------- */

static bool is_default_domain(const char *d) { return ot_str_empty(d) || strcmp(d, "ai.onnx") == 0; }

static int64_t opset_for(const ot_infer *cx, const char *domain) {
    for (size_t i = 0; i < cx->n_opsets; i++) {
        const char *d = cx->opsets[i].domain;
        if (is_default_domain(domain) ? is_default_domain(d) : ot_streq(d, domain)) return cx->opsets[i].version;
    }
    return 0;
}

/* ---- merging inferred with declared types ------------------------------------------------- */

static void fmt_shape(char *buf, size_t size, const ot_ival *v) {
    size_t k = 0;
    if (v->rank < 0) {
        snprintf(buf, size, "(unknown rank)");
        return;
    }
    k += (size_t)snprintf(buf + k, size - k, "[");
    for (int i = 0; i < v->rank && k < size; i++) {
        const ot_idim d = v->dims[i];
        if (d.v >= 0)
            k += (size_t)snprintf(buf + k, size - k, "%s%lld", i ? "," : "", (long long)d.v);
        else
            k += (size_t)snprintf(buf + k, size - k, "%s%s", i ? "," : "", d.param ? d.param : "?");
    }
    if (k < size) snprintf(buf + k, size - k, "]");
}

/* merged = inferred merged with declared; error names node and tensor on a conflict. */
static otter_status merge_declared(ot_inode *n, const char *name, const ot_ival *inf, const ot_ival *decl,
                                   ot_ival *merged) {
    *merged = *inf;
    if (decl->kind == OTTER_TYPE_NONE) return OTTER_OK;
    if (inf->kind == OTTER_TYPE_NONE) {
        *merged = *decl;
        return OTTER_OK;
    }
    if (inf->kind != decl->kind)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "output '%s': inferred type kind %d differs from declared kind %d",
                           name, (int)inf->kind, (int)decl->kind);
    if (inf->kind != OTTER_TYPE_TENSOR) {
        *merged = *decl;
        return OTTER_OK;
    }
    if (inf->dtype != OTTER_DTYPE_UNDEFINED && decl->dtype != OTTER_DTYPE_UNDEFINED && inf->dtype != decl->dtype)
        return ot_inf_fail(n, OTTER_ERR_INVALID,
                           "output '%s': inferred element type %s differs from existing element type %s", name,
                           otter_dtype_name(inf->dtype), otter_dtype_name(decl->dtype));
    if (merged->dtype == OTTER_DTYPE_UNDEFINED) merged->dtype = decl->dtype;
    if (decl->rank < 0) return OTTER_OK;
    if (inf->rank < 0) {
        merged->rank = decl->rank;
        merged->dims = decl->dims;
        return OTTER_OK;
    }
    char a[256], b[256];
    if (inf->rank != decl->rank) {
        fmt_shape(a, sizeof a, inf);
        fmt_shape(b, sizeof b, decl);
        return ot_inf_fail(n, OTTER_ERR_INVALID, "output '%s': inferred shape %s and existing shape %s differ in rank",
                           name, a, b);
    }
    merged->dims = ot_inf_dims(n->cx, inf->rank);
    if (!merged->dims) return OT_INF_NOMEM(n);
    for (int i = 0; i < inf->rank; i++) {
        ot_idim x = inf->dims[i], y = decl->dims[i];
        if (x.v >= 0 && y.v >= 0 && x.v != y.v) {
            fmt_shape(a, sizeof a, inf);
            fmt_shape(b, sizeof b, decl);
            return ot_inf_fail(n, OTTER_ERR_INVALID,
                               "output '%s': inferred shape %s and existing shape %s differ in dimension %d", name, a,
                               b, i);
        }
        merged->dims[i] = y.v >= 0 ? y : x.v >= 0 ? x : y.param ? y : x;
    }
    return OTTER_OK;
}

/* Fill the unknown parts of an IR type from a record (never changes known parts). */
static otter_status type_fill(otter_type *t, const ot_ival *v) {
    if (v->kind != OTTER_TYPE_TENSOR) {
        if (t->kind == OTTER_TYPE_NONE && v->other) return otter_type_copy(t, v->other);
        return OTTER_OK;
    }
    if (t->kind == OTTER_TYPE_NONE) {
        otter_type_init_tensor(t, v->dtype, -1, NULL);
        t->has_elem_type = v->dtype != OTTER_DTYPE_UNDEFINED;
    }
    if (t->kind != OTTER_TYPE_TENSOR) return OTTER_OK;
    if (!t->has_elem_type && v->dtype != OTTER_DTYPE_UNDEFINED) {
        t->elem_type = v->dtype;
        t->has_elem_type = true;
    }
    if (v->rank < 0) return OTTER_OK;
    if (t->rank < 0) {
        int64_t dims[OTTER_MAX_RANK];
        const char *params[OTTER_MAX_RANK];
        if (v->rank > OTTER_MAX_RANK) return OTTER_OK;
        for (int i = 0; i < v->rank; i++) {
            dims[i] = v->dims[i].v;
            params[i] = v->dims[i].param;
        }
        otter_dtype dt = t->has_elem_type ? t->elem_type : v->dtype;
        bool has_dt = t->has_elem_type || v->dtype != OTTER_DTYPE_UNDEFINED;
        OT_TRY(otter_type_set_tensor(t, dt, v->rank, dims, params));
        t->has_elem_type = has_dt;
        return OTTER_OK;
    }
    if (t->rank != v->rank) return OTTER_OK;
    for (int i = 0; i < t->rank; i++) {
        otter_dim *d = &t->dims[i];
        if (d->value >= 0 || (d->param && d->param[0])) continue;
        if (v->dims[i].v >= 0) {
            d->value = v->dims[i].v;
        } else if (v->dims[i].param) {
            ot_free(d->param);
            d->param = ot_strdup(v->dims[i].param);
            if (!d->param) return OT_NOMEM();
        }
    }
    return OTTER_OK;
}

static otter_status type_from_ival(otter_type *t, const ot_ival *v) {
    memset(t, 0, sizeof *t);
    t->rank = -1;
    return type_fill(t, v);
}

/* ---- the walk ----------------------------------------------------------------------------- */

typedef struct graph_run {
    ot_scope scope;
    ot_scope declared; /* value_info and graph outputs of this graph, as records */
} graph_run;

static otter_status infer_graph(ot_infer *cx, otter_graph *g, ot_scope *parent, size_t n_given,
                                const ot_ival *const *given, ot_ival *outs, size_t n_outs);

otter_status ot_infer_subgraph(ot_inode *n, otter_graph *g, size_t n_given, const ot_ival *const *given, ot_ival *outs,
                               size_t n_outs) {
    otter_status s = infer_graph(n->cx, g, n->scope, n_given, given, outs, n_outs);
    if (s != OTTER_OK)
        return ot_error_context(s, "in subgraph '%s' of node '%s' (%s): ", g->name ? g->name : "",
                                n->node->name ? n->node->name : "", n->node->op_type);
    return OTTER_OK;
}

static otter_status declare(ot_infer *cx, ot_scope *sc, const char *name, const otter_type *t) {
    if (ot_str_empty(name)) return OTTER_OK;
    ot_ival *v = ival_new(cx);
    if (!v) return OT_NOMEM();
    OT_TRY(ival_from_type(cx, t, v));
    return scope_put(cx, sc, name, v);
}

static otter_status infer_node(ot_infer *cx, graph_run *run, otter_node *node) {
    ot_inode n = {0};
    n.cx = cx;
    n.scope = &run->scope;
    n.node = node;
    n.opset = opset_for(cx, node->domain);
    n.n_in = node->n_inputs;
    n.n_out = node->n_outputs;
    n.in = ot_inf_alloc(cx, sizeof(ot_ival *) * (n.n_in + 1));
    n.out = ot_inf_alloc(cx, sizeof(ot_ival) * (n.n_out + 1));
    if (!n.in || !n.out) return OT_NOMEM();
    for (size_t i = 0; i < n.n_in; i++) {
        if (ot_str_empty(node->inputs[i])) continue;
        const ot_ival *v = scope_get(&run->scope, node->inputs[i]);
        n.in[i] = v ? v : &unknown_ival;
    }
    for (size_t i = 0; i < n.n_out; i++) n.out[i] = unknown_ival;
    if (cx->stats) cx->stats->n_nodes++;

    ot_infer_fn fn = ot_op_infer_rule(node->domain, node->op_type);
    if (!fn) {
        if (cx->stats) cx->stats->n_unknown_ops++;
        if (cx->opts->strict)
            return ot_inf_fail(&n, OTTER_ERR_UNSUPPORTED, "no shape inference rule for operator '%s' (domain '%s')",
                               node->op_type ? node->op_type : "", node->domain ? node->domain : "");
    } else {
        OT_TRY(fn(&n));
    }
    for (size_t i = 0; i < n.n_out; i++) {
        const char *name = node->outputs[i];
        if (ot_str_empty(name)) continue;
        ot_ival *v = ival_new(cx);
        if (!v) return OT_NOMEM();
        const ot_ival *decl = scope_get_local(&run->declared, name);
        OT_TRY(merge_declared(&n, name, &n.out[i], decl ? decl : &unknown_ival, v));
        if (cx->opts->no_data_prop) {
            v->n_data = -1;
            v->idata = NULL;
            v->fdata = NULL;
        }
        if (cx->stats && v->kind != OTTER_TYPE_NONE) {
            cx->stats->n_outputs_typed++;
            if (v->kind == OTTER_TYPE_TENSOR && v->rank >= 0) cx->stats->n_outputs_shaped++;
        }
        OT_TRY(scope_put(cx, &run->scope, name, v));
    }
    return OTTER_OK;
}

static otter_status write_back(ot_infer *cx, otter_graph *g, graph_run *run) {
    for (size_t k = 0; k < g->n_nodes; k++) {
        const otter_node *node = g->nodes[k];
        for (size_t i = 0; i < node->n_outputs; i++) {
            const char *name = node->outputs[i];
            if (ot_str_empty(name)) continue;
            const ot_ival *v = scope_get_local(&run->scope, name);
            if (!v || v->kind == OTTER_TYPE_NONE) continue;
            ptrdiff_t o = otter_graph_find_output(g, name);
            if (o >= 0) {
                OT_TRY(type_fill(&g->outputs[o].type, v));
                g->outputs[o].has_type = g->outputs[o].type.kind != OTTER_TYPE_NONE;
                continue;
            }
            ptrdiff_t vi = otter_graph_find_value_info(g, name);
            if (vi >= 0) {
                OT_TRY(type_fill(&g->value_info[vi].type, v));
                g->value_info[vi].has_type = g->value_info[vi].type.kind != OTTER_TYPE_NONE;
                continue;
            }
            otter_type t;
            OT_TRY(type_from_ival(&t, v));
            otter_status s = otter_graph_add_value_info(g, name, &t);
            otter_type_clear(&t);
            OT_TRY(s);
        }
    }
    (void)cx;
    return OTTER_OK;
}

static otter_status infer_graph(ot_infer *cx, otter_graph *g, ot_scope *parent, size_t n_given,
                                const ot_ival *const *given, ot_ival *outs, size_t n_outs) {
    graph_run *run = ot_inf_alloc(cx, sizeof *run);
    if (!run) return OT_NOMEM();
    run->scope.parent = parent;

    for (size_t i = 0; i < g->n_value_info; i++)
        OT_TRY(declare(cx, &run->declared, g->value_info[i].name, &g->value_info[i].type));
    for (size_t i = 0; i < g->n_outputs; i++)
        OT_TRY(declare(cx, &run->declared, g->outputs[i].name, &g->outputs[i].type));
    /* Declared intermediate types are known before their producer runs (as in onnx). */
    for (size_t i = 0; i < g->n_value_info; i++)
        OT_TRY(declare(cx, &run->scope, g->value_info[i].name, &g->value_info[i].type));

    for (size_t i = 0; i < g->n_inputs; i++) {
        const char *name = g->inputs[i].name;
        if (ot_str_empty(name)) continue;
        ot_ival *v = ival_new(cx);
        if (!v) return OT_NOMEM();
        OT_TRY(ival_from_type(cx, &g->inputs[i].type, v));
        if (i < n_given && given[i] && given[i]->kind != OTTER_TYPE_NONE) {
            /* A subgraph's formal input: the caller's type fills what the declaration leaves open;
             * a disagreement keeps the declaration (the caller's view may be less precise). */
            ot_inode tmp = {0};
            otter_node fake = {0};
            fake.name = (char *)"";
            fake.op_type = (char *)"(subgraph input)";
            tmp.cx = cx;
            tmp.node = &fake;
            ot_ival *m = ival_new(cx);
            if (!m) return OT_NOMEM();
            if (merge_declared(&tmp, name, given[i], v, m) == OTTER_OK) {
                m->n_data = -1;
                m->idata = NULL;
                m->fdata = NULL;
                v = m;
            } else {
                otter_clear_error();
            }
        }
        OT_TRY(scope_put(cx, &run->scope, name, v));
    }
    for (size_t i = 0; i < g->n_initializers; i++) {
        const otter_tensor *t = g->initializers[i];
        if (ot_str_empty(t->name)) continue;
        ot_ival *v = ival_new(cx);
        if (!v) return OT_NOMEM();
        OT_TRY(ot_ival_from_tensor(cx, t, v));
        ot_ival *declared = scope_get_local(&run->scope, t->name);
        if (declared && declared->kind == OTTER_TYPE_TENSOR && declared->rank >= 0 &&
            otter_graph_find_input(g, t->name) >= 0) {
            /* An initializer that is also an input: the input's declared shape may be looser
             * (it can be overridden); keep the declaration's shape, the initializer's values. */
            v->rank = declared->rank;
            v->dims = declared->dims;
            if (declared->dtype != OTTER_DTYPE_UNDEFINED) v->dtype = declared->dtype;
        }
        OT_TRY(scope_put(cx, &run->scope, t->name, v));
    }

    for (size_t k = 0; k < g->n_nodes; k++) OT_TRY(infer_node(cx, run, g->nodes[k]));

    for (size_t i = 0; i < n_outs && i < g->n_outputs; i++) {
        const ot_ival *v = scope_get(&run->scope, g->outputs[i].name);
        if (v) {
            OT_TRY(ot_ival_copy(cx, &outs[i], v));
        } else {
            OT_TRY(ival_from_type(cx, &g->outputs[i].type, &outs[i]));
        }
        /* the declared output type refines what was inferred */
        const ot_ival *decl = scope_get_local(&run->declared, g->outputs[i].name);
        if (decl && outs[i].kind == OTTER_TYPE_NONE) outs[i] = *decl;
    }
    if (!cx->opts->check_only) OT_TRY(write_back(cx, g, run));
    return OTTER_OK;
}

otter_status otter_graph_infer_shapes(otter_graph *g, size_t n_opsets, const otter_opset *opsets,
                                      const otter_infer_options *opts, otter_infer_stats *stats) {
    static const otter_infer_options defaults = {0};
    if (!g) return ot_error(OTTER_ERR_ARGUMENT, "otter_graph_infer_shapes: graph is NULL");
    ot_infer cx = {0};
    cx.opts = opts ? opts : &defaults;
    cx.stats = stats;
    if (stats) memset(stats, 0, sizeof *stats);
    cx.n_opsets = n_opsets;
    cx.opsets = opsets;
    otter_status s = infer_graph(&cx, g, NULL, 0, NULL, NULL, 0);
    arena_free(&cx);
    return s;
}

otter_status otter_model_infer_shapes_ex(otter_model *m, const otter_infer_options *opts, otter_infer_stats *stats) {
    if (!m || !m->graph) return ot_error(OTTER_ERR_ARGUMENT, "otter_model_infer_shapes: model or graph is NULL");
    return otter_graph_infer_shapes(m->graph, m->n_opsets, m->opsets, opts, stats);
}

otter_status otter_model_infer_shapes(otter_model *m, const otter_infer_options *opts) {
    return otter_model_infer_shapes_ex(m, opts, NULL);
}

const char *ot_inf_strdup(ot_infer *cx, const char *s) { return arena_strdup(cx, s); }
