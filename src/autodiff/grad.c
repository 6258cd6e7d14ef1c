/* The gradient builder: a graph-to-graph rewrite in reverse topological order.
 *
 * 1. Mark active tensors: the requested ones, and the float outputs of nodes with an active input
 *    that the node's rule can differentiate.
 * 2. Mark the nodes on a path from an active input to the loss; those need a rule.
 * 3. Count, per active tensor, how many gradient parts it will receive; one part is named
 *    "<x>_grad" directly, several are "<x>_grad_<i>" and summed into "<x>_grad".
 * 4. Walk those nodes backwards; each rule turns its outputs' gradients into its inputs'.
 * The work happens on a copy, swapped in on success, so a failure leaves the model unchanged. */
#include "autodiff/grad.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "core/strmap.h"
#include "otter/autodiff.h"
#include "otter/edit.h"
#include "otter/infer.h"

/* Gradient parts a tensor receives. */
typedef struct parts {
    const char *tensor;
    size_t expected, n;
    const char **names;
} parts;

struct ot_grad {
    otter_model *m; /* the copy being rewritten */
    otter_graph *gr;
    otter_model *typed; /* a copy with inferred value_info, for types */
    otter_status status;
    char message[512];
    otter_node *node; /* the forward node whose rule runs */
    const ot_op_entry *rule;
    ot_strmap active;     /* tensor -> 1 */
    ot_strmap reaches;    /* tensor -> 1 when the loss depends on it */
    ot_strmap names;      /* every tensor name in the graph (for unique temporaries) */
    ot_strmap part_index; /* tensor -> index in parts */
    parts *parts;
    size_t n_parts, cap_parts;
    char **pool; /* strings the builder owns */
    size_t n_pool, cap_pool;
    ot_strmap init_types; /* initializer -> otter_type* (owned) */
    size_t counter;
    const char *loss;
};

/* The row of the operator registry whose gradient rule differentiates this node, or NULL. */
static const ot_op_entry *find_rule(const char *domain, const char *op) { return ot_op_grad_rule(domain, op); }

int otter_has_gradient_rule(const char *domain, const char *op_type) { return find_rule(domain, op_type) != NULL; }

/* ---- sticky errors and owned strings -------------------------------------------------------- */

void ot_grad_fail(ot_grad *g, otter_status s, const char *fmt, ...) {
    if (g->status != OTTER_OK) return;
    g->status = s;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->message, sizeof g->message, fmt, ap);
    va_end(ap);
}

bool ot_grad_failed(const ot_grad *g) { return g->status != OTTER_OK; }

static void nomem(ot_grad *g) { ot_grad_fail(g, OTTER_ERR_NOMEM, "out of memory building gradients"); }

/* Take ownership of s (NULL marks failure). */
static const char *own(ot_grad *g, char *s) {
    if (!s || ot_grow((void **)&g->pool, &g->cap_pool, g->n_pool + 1, sizeof *g->pool) != OTTER_OK) {
        ot_free(s);
        nomem(g);
        return NULL;
    }
    g->pool[g->n_pool++] = s;
    return s;
}

static bool name_taken(ot_grad *g, const char *name) { return ot_strmap_get(&g->names, name, NULL); }

static void claim_name(ot_grad *g, const char *name) {
    if (name && ot_strmap_put(&g->names, name, 1) != OTTER_OK) nomem(g);
}

/* ---- queries ---------------------------------------------------------------------------- */

int64_t ot_grad_opset(const ot_grad *g) { return otter_model_opset(g->m, ""); }
otter_graph *ot_grad_graph(ot_grad *g) { return g->gr; }

const otter_type *ot_grad_type(ot_grad *g, const char *name) {
    if (!name || !name[0]) return NULL;
    const otter_type *t = otter_graph_value_type(g->typed->graph, name);
    if (t) return t;
    intptr_t v;
    if (ot_strmap_get(&g->init_types, name, &v)) return (const otter_type *)v;
    ptrdiff_t i = otter_graph_find_initializer(g->typed->graph, name);
    if (i < 0) return NULL;
    const otter_tensor *init = g->typed->graph->initializers[i];
    otter_type *ty = ot_calloc(1, sizeof *ty);
    if (!ty) return NULL;
    otter_type_init_tensor(ty, init->dtype, init->rank, init->dims);
    if (ot_strmap_put(&g->init_types, init->name, (intptr_t)ty) != OTTER_OK) {
        otter_type_clear(ty);
        ot_free(ty);
        return NULL;
    }
    return ty;
}

int ot_grad_rank(ot_grad *g, const char *name) {
    const otter_type *t = ot_grad_type(g, name);
    return t && t->kind == OTTER_TYPE_TENSOR ? t->rank : -1;
}

static bool is_float(ot_grad *g, const char *name) {
    const otter_type *t = ot_grad_type(g, name);
    /* Unknown types are assumed float: the rule decides; integer tensors are always typed. */
    return !t || !t->has_elem_type || otter_dtype_is_float(t->elem_type);
}

static bool active(const ot_grad *g, const char *name) { return name && ot_strmap_get(&g->active, name, NULL); }
static bool reaches(const ot_grad *g, const char *name) { return name && ot_strmap_get(&g->reaches, name, NULL); }

static bool diff_input(const ot_op_entry *r, size_t i) { return !r || ot_op_diff_input(r, i); }

bool ot_grad_needs(ot_grad *g, size_t i) {
    const otter_node *n = g->node;
    return i < n->n_inputs && diff_input(g->rule, i) && active(g, n->inputs[i]) && is_float(g, n->inputs[i]);
}

/* ---- gradient parts --------------------------------------------------------------------- */

static parts *parts_of(ot_grad *g, const char *tensor, bool create) {
    intptr_t i;
    if (ot_strmap_get(&g->part_index, tensor, &i)) return &g->parts[i];
    if (!create) return NULL;
    if (ot_grow((void **)&g->parts, &g->cap_parts, g->n_parts + 1, sizeof *g->parts) != OTTER_OK ||
        ot_strmap_put(&g->part_index, tensor, (intptr_t)g->n_parts) != OTTER_OK) {
        nomem(g);
        return NULL;
    }
    parts *p = &g->parts[g->n_parts++];
    memset(p, 0, sizeof *p);
    p->tensor = tensor;
    return p;
}

static const char *grad_name(ot_grad *g, const char *tensor) {
    const char *n = own(g, ot_sprintf("%s_grad", tensor));
    if (n && name_taken(g, n)) {
        ot_grad_fail(g, OTTER_ERR_INVALID, "the gradient of '%s' would be named '%s', which the graph already uses",
                     tensor, n);
        return NULL;
    }
    claim_name(g, n);
    return n;
}

/* Register one more part for tensor and return the name it must be written to. */
static const char *new_part(ot_grad *g, const char *tensor) {
    parts *p = parts_of(g, tensor, false);
    if (!p || p->n >= p->expected) {
        ot_grad_fail(g, OTTER_ERR_INVALID, "internal: unexpected gradient part for '%s'", tensor);
        return NULL;
    }
    const char *name;
    if (p->expected == 1) {
        name = grad_name(g, tensor);
    } else {
        name = own(g, ot_sprintf("%s_grad_%zu", tensor, p->n));
        if (name && name_taken(g, name)) name = ot_grad_tmp(g, "part");
        claim_name(g, name);
    }
    if (!name) return NULL;
    const char **grown = ot_realloc(p->names, (p->n + 1) * sizeof *grown);
    if (!grown) {
        nomem(g);
        return NULL;
    }
    p->names = grown;
    p->names[p->n++] = name;
    return name;
}

const char *ot_grad_dx(ot_grad *g, size_t i) {
    if (!ot_grad_needs(g, i) || ot_grad_failed(g)) return NULL;
    return new_part(g, g->node->inputs[i]);
}

/* The whole gradient of a tensor, once all its parts are in (Sum of several). NULL: zero. */
static const char *finish(ot_grad *g, const char *tensor) {
    parts *p = parts_of(g, tensor, false);
    if (!p || p->n == 0) return NULL;
    if (p->n != p->expected) {
        ot_grad_fail(g, OTTER_ERR_INVALID, "internal: '%s' got %zu of %zu gradient parts", tensor, p->n, p->expected);
        return NULL;
    }
    if (p->expected == 1) return p->names[0];
    const char *sum = grad_name(g, tensor);
    if (!sum) return NULL;
    otter_node *n = ot_grad_emit(g, "Sum", "", p->n, p->names, 1, &sum);
    p->expected = p->n = 1; /* later lookups get the sum */
    p->names[0] = sum;
    return n ? sum : NULL;
}

const char *ot_grad_dy(ot_grad *g, size_t i) {
    const otter_node *n = g->node;
    if (i >= n->n_outputs || !n->outputs[i][0]) return NULL;
    return finish(g, n->outputs[i]);
}

/* ---- emitting ------------------------------------------------------------------------------ */

const char *ot_grad_tmp(ot_grad *g, const char *hint) {
    const char *base = g->node && g->node->name && g->node->name[0] ? g->node->name : "";
    for (;;) {
        const char *name = own(g, ot_sprintf("%s_Grad/%s_%zu", base, hint, g->counter++));
        if (!name) return NULL;
        if (!name_taken(g, name)) {
            claim_name(g, name);
            return name;
        }
    }
}

otter_node *ot_grad_emit(ot_grad *g, const char *op_type, const char *domain, size_t n_in, const char *const *ins,
                         size_t n_out, const char *const *outs) {
    if (ot_grad_failed(g)) return NULL;
    for (size_t i = 0; i < n_in; i++)
        if (!ins[i]) return NULL; /* an earlier step failed */
    for (size_t i = 0; i < n_out; i++)
        if (!outs[i]) return NULL;
    const char *name = ot_grad_tmp(g, op_type);
    otter_node *n;
    if (!name || otter_node_create(&n, op_type, name, n_in, ins, n_out, outs) != OTTER_OK) {
        nomem(g);
        return NULL;
    }
    if (domain && domain[0] && otter_node_set_domain(n, domain) != OTTER_OK) {
        otter_node_free(n);
        nomem(g);
        return NULL;
    }
    if (otter_graph_add_node(g->gr, n) != OTTER_OK) { /* frees n */
        nomem(g);
        return NULL;
    }
    return n;
}

const char *ot_grad_op1(ot_grad *g, const char *op_type, const char *out, size_t n_in, const char *const *ins) {
    return ot_grad_emit(g, op_type, "", n_in, ins, 1, &out) ? out : NULL;
}

const char *ot_grad_const_i64(ot_grad *g, const char *hint, size_t count, const int64_t *v, bool scalar) {
    const char *name = ot_grad_tmp(g, hint);
    if (!name) return NULL;
    int64_t dims[1] = {(int64_t)count};
    otter_tensor *t;
    if (otter_tensor_from_data(&t, name, OTTER_DTYPE_INT64, scalar ? 0 : 1, dims, v) != OTTER_OK ||
        otter_graph_add_initializer(g->gr, t) != OTTER_OK) {
        nomem(g);
        return NULL;
    }
    return name;
}

const char *ot_grad_const_f32(ot_grad *g, const char *hint, float v, otter_dtype dtype) {
    const char *name = ot_grad_tmp(g, hint);
    if (!name) return NULL;
    otter_tensor *t;
    if (otter_tensor_create(&t, name, dtype, 0, NULL) != OTTER_OK) {
        nomem(g);
        return NULL;
    }
    if (dtype == OTTER_DTYPE_DOUBLE)
        *(double *)t->data = v;
    else if (dtype == OTTER_DTYPE_FLOAT)
        *(float *)t->data = v;
    else {
        otter_tensor_free(t);
        ot_grad_fail(g, OTTER_ERR_UNSUPPORTED, "gradients of %s tensors are not supported", otter_dtype_name(dtype));
        return NULL;
    }
    if (otter_graph_add_initializer(g->gr, t) != OTTER_OK) nomem(g);
    return name;
}

void ot_grad_declare_like(ot_grad *g, const char *name, const char *like) {
    const otter_type *t = ot_grad_type(g, like);
    if (name && t && otter_graph_add_value_info(g->gr, name, t) != OTTER_OK) nomem(g);
}

void ot_grad_copy_attrs(ot_grad *g, otter_node *dst, const otter_node *src) {
    if (!dst) return;
    otter_node *tmp;
    if (otter_node_clone(&tmp, src) != OTTER_OK) OT_GRAD_NOMEM(g);
    dst->attrs = tmp->attrs; /* move the cloned attributes over */
    dst->n_attrs = tmp->n_attrs;
    tmp->attrs = NULL;
    tmp->n_attrs = 0;
    otter_node_free(tmp);
}

const char *ot_grad_forward_output(ot_grad *g, otter_node *n, size_t index, const char *hint) {
    while (n->n_outputs <= index) {
        char **grown = ot_realloc(n->outputs, (n->n_outputs + 1) * sizeof *grown);
        if (!grown) {
            nomem(g);
            return NULL;
        }
        n->outputs = grown;
        if (!(n->outputs[n->n_outputs++] = ot_strdup(""))) {
            n->n_outputs--;
            nomem(g);
            return NULL;
        }
    }
    if (n->outputs[index][0]) return n->outputs[index];
    const char *name = ot_grad_tmp(g, hint);
    if (!name) return NULL;
    char *copy = ot_strdup(name);
    if (!copy) {
        nomem(g);
        return NULL;
    }
    ot_free(n->outputs[index]);
    n->outputs[index] = copy;
    return copy;
}

/* Axes along which x was broadcast to y's shape, from static shapes. Returns false when they
 * can't be known (unknown rank, or a dimension that may or may not have been broadcast). */
static bool broadcast_axes(ot_grad *g, const char *x, const char *y, int64_t *axes, size_t *n_axes, bool *leading) {
    const otter_type *tx = ot_grad_type(g, x), *ty = ot_grad_type(g, y);
    if (!tx || !ty || tx->rank < 0 || ty->rank < 0 || tx->rank > ty->rank) return false;
    int off = ty->rank - tx->rank;
    *n_axes = 0;
    *leading = true;
    for (int i = 0; i < off; i++) axes[(*n_axes)++] = i;
    for (int i = 0; i < tx->rank; i++) {
        const otter_dim *dx = &tx->dims[i], *dy = &ty->dims[i + off];
        if (dx->value == 1 && dy->value != 1) {
            axes[(*n_axes)++] = i + off;
            *leading = false;
        } else if (dx->value >= 0 && dx->value == dy->value) {
        } else if (dx->param && dy->param && strcmp(dx->param, dy->param) == 0) {
        } else if (dx->value > 1) {
        } else {
            return false;
        }
    }
    return true;
}

/* Whether x is known to hold one element (rank 0, or every dimension 1). */
static bool single_element(ot_grad *g, const char *x) {
    const otter_type *t = ot_grad_type(g, x);
    if (!t || t->kind != OTTER_TYPE_TENSOR || t->rank < 0) return false;
    for (int i = 0; i < t->rank; i++)
        if (t->dims[i].value != 1) return false;
    return true;
}

otter_node *ot_grad_reduce_sum(ot_grad *g, const char *in, size_t n_axes, const int64_t *axes, bool keepdims,
                               const char *out) {
    bool as_input = n_axes && ot_grad_opset(g) >= 13;
    const char *ax = as_input ? ot_grad_const_i64(g, "ReduceAxes", n_axes, axes, false) : NULL;
    otter_node *n = as_input ? ot_grad_emit(g, "ReduceSum", "", 2, (const char *[]){in, ax}, 1, &out)
                             : ot_grad_emit(g, "ReduceSum", "", 1, &in, 1, &out);
    if (n && (otter_node_set_attr_int(n, "keepdims", keepdims) != OTTER_OK ||
              (n_axes && !as_input && otter_node_set_attr_ints(n, "axes", n_axes, axes) != OTTER_OK)))
        nomem(g);
    return n;
}

/* The shapes decide the axes only at run time: ONNX Runtime's shape-independent graph,
 * BroadcastGradientArgs(Shape(x), Shape(grad)) -> x's axes, ReduceSum over them (keepdims; none
 * reduced when there are none), Reshape to Shape(x). Shape(grad) rather than Shape(y), so the
 * forward result needn't stay alive for it. Below opset 13, where ReduceSum's axes are an attribute,
 * the sum is com.microsoft ReduceSumTraining, as ORT emits it. */
static void unbroadcast_at_run_time(ot_grad *g, const char *grad, const char *x, const char *out) {
    const char *x_shape = OT_G1(g, "Shape", ot_grad_tmp(g, "x_shape"), x);
    const char *dy_shape = OT_G1(g, "Shape", ot_grad_tmp(g, "dy_shape"), grad);
    const char *axes = ot_grad_tmp(g, "broadcast_axes");
    ot_grad_emit(g, "BroadcastGradientArgs", "com.microsoft", 2, (const char *[]){x_shape, dy_shape}, 1, &axes);
    const char *sum = ot_grad_tmp(g, "reduced");
    bool v13 = ot_grad_opset(g) >= 13;
    otter_node *n = ot_grad_emit(g, v13 ? "ReduceSum" : "ReduceSumTraining", v13 ? "" : "com.microsoft", 2,
                                 (const char *[]){grad, axes}, 1, &sum);
    if (n && (otter_node_set_attr_int(n, "keepdims", 1) != OTTER_OK ||
              otter_node_set_attr_int(n, "noop_with_empty_axes", 1) != OTTER_OK))
        nomem(g);
    OT_G1(g, "Reshape", out, sum, x_shape);
}

void ot_grad_unbroadcast(ot_grad *g, const char *grad, const char *x, const char *y, const char *out) {
    if (!grad || !out) return;
    int64_t axes[OTTER_MAX_RANK];
    size_t n_axes;
    bool leading;
    if (!broadcast_axes(g, x, y, axes, &n_axes, &leading)) {
        if (!single_element(g, x)) {
            unbroadcast_at_run_time(g, grad, x, out);
            return;
        }
        /* One element (a scalar divisor, a [1, 1] bias): the sum of everything, whatever y's shape. */
        bool scalar = ot_grad_rank(g, x) == 0;
        const char *sum = scalar ? out : ot_grad_tmp(g, "reduced");
        ot_grad_reduce_sum(g, grad, 0, NULL, false, sum);
        if (!scalar) OT_G1(g, "Reshape", out, sum, OT_G1(g, "Shape", ot_grad_tmp(g, "shape"), x));
        return;
    }
    if (n_axes == 0) {
        OT_G1(g, "Identity", out, grad);
        return;
    }
    bool reshape = !leading && ot_grad_rank(g, x) != ot_grad_rank(g, y);
    const char *sum = reshape ? ot_grad_tmp(g, "reduced") : out;
    ot_grad_reduce_sum(g, grad, n_axes, axes, !leading, sum);
    if (reshape) {
        const char *shape = OT_G1(g, "Shape", ot_grad_tmp(g, "shape"), x);
        OT_G1(g, "Reshape", out, sum, shape);
    }
}

/* ---- the driver ---------------------------------------------------------------------------- */

static void mark(ot_grad *g, ot_strmap *set, const char *name) {
    if (name && name[0] && ot_strmap_put(set, name, 1) != OTTER_OK) nomem(g);
}

static void builder_free(ot_grad *g) {
    for (size_t i = 0; i < g->n_parts; i++) ot_free(g->parts[i].names);
    ot_free(g->parts);
    for (size_t i = 0; i < g->n_pool; i++) ot_free(g->pool[i]);
    ot_free(g->pool);
    for (size_t i = 0; i < g->init_types.cap; i++)
        if (g->init_types.keys[i]) {
            otter_type *t = (otter_type *)g->init_types.values[i];
            otter_type_clear(t);
            ot_free(t);
        }
    ot_strmap_free(&g->init_types);
    ot_strmap_free(&g->active);
    ot_strmap_free(&g->reaches);
    ot_strmap_free(&g->names);
    ot_strmap_free(&g->part_index);
    otter_model_free(g->typed);
}

static const char *node_label(const otter_node *n) { return n->name && n->name[0] ? n->name : n->outputs[0]; }

const char *ot_grad_zeros_like(ot_grad *g, const char *like, const char *dtype_of, const char *out) {
    const otter_type *t = ot_grad_type(g, dtype_of ? dtype_of : like);
    otter_dtype dt = t && t->has_elem_type ? t->elem_type : OTTER_DTYPE_FLOAT;
    const char *shape = OT_G1(g, "Shape", ot_grad_tmp(g, "shape"), like);
    if (!out) out = ot_grad_tmp(g, "zeros");
    otter_node *n = ot_grad_emit(g, "ConstantOfShape", "", 1, &shape, 1, &out);
    otter_tensor *zero;
    int64_t one = 1;
    if (n && (otter_tensor_create(&zero, NULL, dt, 1, &one) != OTTER_OK ||
              otter_node_set_attr_tensor(n, "value", zero) != OTTER_OK))
        nomem(g);
    return n ? out : NULL;
}

static void build(ot_grad *g, const otter_grad_options *o, size_t n_forward) {
    otter_graph *gr = g->gr;
    for (size_t i = 0; i < gr->n_inputs; i++) claim_name(g, gr->inputs[i].name);
    for (size_t i = 0; i < gr->n_initializers; i++) claim_name(g, gr->initializers[i]->name);
    for (size_t i = 0; i < gr->n_nodes; i++) {
        claim_name(g, gr->nodes[i]->name);
        for (size_t j = 0; j < gr->nodes[i]->n_outputs; j++) claim_name(g, gr->nodes[i]->outputs[j]);
    }
    for (size_t i = 0; i < o->n_wrt; i++) {
        if (otter_graph_find_input(gr, o->wrt[i]) < 0 && otter_graph_find_initializer(gr, o->wrt[i]) < 0)
            OT_GRAD_FAIL(g, OTTER_ERR_NOT_FOUND, "'%s' is neither a graph input nor an initializer", o->wrt[i]);
        if (!is_float(g, o->wrt[i]))
            OT_GRAD_FAIL(g, OTTER_ERR_INVALID, "'%s' is not a float tensor: it can't have a gradient", o->wrt[i]);
        mark(g, &g->active, o->wrt[i]);
    }
    if (otter_graph_find_producer(gr, o->loss) < 0 && otter_graph_find_input(gr, o->loss) < 0)
        OT_GRAD_FAIL(g, OTTER_ERR_NOT_FOUND, "the loss '%s' is not a tensor of the graph", o->loss);

    /* 1. forward: active tensors. */
    for (size_t k = 0; k < n_forward; k++) {
        otter_node *n = gr->nodes[k];
        const ot_op_entry *r = find_rule(n->domain, n->op_type);
        bool any = false;
        for (size_t i = 0; i < n->n_inputs; i++) any |= diff_input(r, i) && active(g, n->inputs[i]);
        if (any)
            for (size_t j = 0; j < n->n_outputs; j++)
                if (n->outputs[j][0] && is_float(g, n->outputs[j])) mark(g, &g->active, n->outputs[j]);
    }
    /* 2. backward: what the loss depends on, and which nodes need rules. */
    mark(g, &g->reaches, o->loss);
    bool *relevant = ot_calloc(n_forward ? n_forward : 1, sizeof *relevant);
    if (!relevant) OT_GRAD_NOMEM(g);
    for (size_t k = n_forward; k-- > 0;) {
        otter_node *n = gr->nodes[k];
        bool out_reaches = false;
        for (size_t j = 0; j < n->n_outputs; j++) out_reaches |= active(g, n->outputs[j]) && reaches(g, n->outputs[j]);
        if (!out_reaches) continue;
        const ot_op_entry *r = find_rule(n->domain, n->op_type);
        bool any_active_input = false;
        for (size_t i = 0; i < n->n_inputs; i++) any_active_input |= diff_input(r, i) && active(g, n->inputs[i]);
        if (!any_active_input) continue;
        if (!r) {
            ot_free(relevant);
            OT_GRAD_FAIL(g, OTTER_ERR_UNSUPPORTED,
                         "node '%s' (%s%s%s) has no gradient rule, and it lies between a trainable parameter "
                         "and the loss '%s'",
                         node_label(n), ot_str_empty(n->domain) ? "" : n->domain,
                         ot_str_empty(n->domain) ? "" : "::", n->op_type, o->loss);
        }
        relevant[k] = true;
        for (size_t i = 0; i < n->n_inputs; i++)
            if (diff_input(r, i) && active(g, n->inputs[i])) mark(g, &g->reaches, n->inputs[i]);
    }
    /* 3. expected parts: the seed, and one per differentiable edge of a relevant node. */
    parts *seed = parts_of(g, o->loss, true);
    if (seed) seed->expected++;
    for (size_t k = 0; k < n_forward && !ot_grad_failed(g); k++) {
        if (!relevant[k]) continue;
        g->node = gr->nodes[k];
        g->rule = find_rule(g->node->domain, g->node->op_type);
        for (size_t i = 0; i < g->node->n_inputs; i++) {
            if (!ot_grad_needs(g, i)) continue;
            parts *p = parts_of(g, g->node->inputs[i], true);
            if (p) p->expected++;
        }
    }
    /* The seed: d(loss)/d(loss) = 1, as ORT names it. */
    g->node = NULL;
    if (seed && !ot_grad_failed(g)) {
        const otter_type *lt = ot_grad_type(g, o->loss);
        const char *name = new_part(g, o->loss);
        otter_tensor *one;
        otter_dtype dt = lt && lt->has_elem_type ? lt->elem_type : OTTER_DTYPE_FLOAT;
        if (name && dt != OTTER_DTYPE_FLOAT && dt != OTTER_DTYPE_DOUBLE)
            ot_grad_fail(g, OTTER_ERR_INVALID, "the loss '%s' is %s, not a float tensor", o->loss,
                         otter_dtype_name(dt));
        else if (name &&
                 (otter_tensor_create(&one, name, dt, 0, NULL) != OTTER_OK ||
                  (dt == OTTER_DTYPE_FLOAT ? (void)(*(float *)one->data = 1.0f) : (void)(*(double *)one->data = 1.0),
                   otter_graph_add_initializer(gr, one) != OTTER_OK)))
            nomem(g);
    }
    /* 4. the rules, last node first. */
    for (size_t k = n_forward; k-- > 0 && !ot_grad_failed(g);) {
        if (!relevant[k]) continue;
        g->node = gr->nodes[k];
        g->rule = find_rule(g->node->domain, g->node->op_type);
        g->rule->grad(g, g->node);
        if (ot_grad_failed(g) && g->message[0] && !strstr(g->message, "node '")) {
            char *inner =
                ot_sprintf("gradient of node '%s' (%s): %s", node_label(g->node), g->node->op_type, g->message);
            if (inner) {
                snprintf(g->message, sizeof g->message, "%s", inner);
                ot_free(inner);
            }
        }
    }
    ot_free(relevant);
    /* 5. the requested gradients. */
    g->node = NULL;
    g->rule = NULL;
    for (size_t i = 0; i < o->n_wrt && !ot_grad_failed(g); i++) {
        const char *dx = finish(g, o->wrt[i]);
        if (!dx) {
            const char *name = grad_name(g, o->wrt[i]);
            ot_grad_zeros_like(g, o->wrt[i], NULL, name); /* the loss doesn't depend on it */
        }
    }
}

/* Whether a node of g, or of its subgraphs (an If's gradient branches), is in `domain`. */
static bool uses_domain(const otter_graph *g, const char *domain) {
    for (size_t i = 0; i < g->n_nodes; i++) {
        const otter_node *n = g->nodes[i];
        if (ot_streq(n->domain, domain)) return true;
        for (size_t a = 0; a < n->n_attrs; a++)
            if (n->attrs[a].g && uses_domain(n->attrs[a].g, domain)) return true;
    }
    return false;
}

static bool is_default_op(const otter_node *n, const char *op) {
    return ot_str_empty(n->domain) && ot_streq(n->op_type, op);
}

/* Readers of `name` among the graph's nodes and outputs; SIZE_MAX when a subgraph might read it. */
static size_t readers(const otter_graph *gr, const char *name) {
    size_t count = otter_graph_find_output(gr, name) >= 0;
    for (size_t k = 0; k < gr->n_nodes; k++) {
        const otter_node *n = gr->nodes[k];
        for (size_t a = 0; a < n->n_attrs; a++)
            if (n->attrs[a].type == OTTER_ATTR_GRAPH || n->attrs[a].type == OTTER_ATTR_GRAPHS) return SIZE_MAX;
        for (size_t i = 0; i < n->n_inputs; i++) count += ot_streq(n->inputs[i], name);
    }
    return count;
}

/* SiLU as PyTorch exports it, Mul(X, Sigmoid(X)) with the sigmoid read by nothing else, becomes one
 * com.microsoft QuickGelu(X; alpha = 1) before differentiation: its gradient is one QuickGeluGrad
 * reading X, where the two-node form keeps the sigmoid (as large as X) alive from the forward pass
 * to the backward one and differentiates in four nodes. */
static otter_status fuse_silu(otter_graph *gr) {
    bool *drop = ot_calloc(gr->n_nodes + 1, sizeof *drop);
    if (!drop) return OT_NOMEM();
    otter_status s = OTTER_OK;
    for (size_t k = 0; k < gr->n_nodes && s == OTTER_OK; k++) {
        otter_node *mul = gr->nodes[k];
        if (!is_default_op(mul, "Mul") || mul->n_inputs != 2 || mul->n_outputs != 1) continue;
        for (size_t side = 0; side < 2; side++) {
            ptrdiff_t p = otter_graph_find_producer(gr, mul->inputs[side]);
            const otter_node *sig = p >= 0 ? gr->nodes[p] : NULL;
            if (!sig || drop[p] || !is_default_op(sig, "Sigmoid") || sig->n_inputs != 1 ||
                !ot_streq(sig->inputs[0], mul->inputs[1 - side]) || readers(gr, mul->inputs[side]) != 1)
                continue;
            char *op = ot_strdup("QuickGelu");
            s = op ? otter_node_set_domain(mul, "com.microsoft") : OT_NOMEM();
            if (s == OTTER_OK) s = otter_node_set_attr_float(mul, "alpha", 1.0f);
            if (s != OTTER_OK) {
                ot_free(op);
                break;
            }
            ot_free(mul->op_type);
            mul->op_type = op;
            ot_free(mul->inputs[side]);
            mul->inputs[0] = mul->inputs[1 - side];
            mul->n_inputs = 1;
            drop[p] = true;
            break;
        }
    }
    size_t kept = 0;
    for (size_t k = 0; k < gr->n_nodes; k++) {
        if (drop[k])
            otter_node_free(gr->nodes[k]);
        else
            gr->nodes[kept++] = gr->nodes[k];
    }
    gr->n_nodes = kept;
    ot_free(drop);
    return s;
}

otter_status otter_model_add_gradients(otter_model *m, const otter_grad_options *o) {
    if (!o || !o->loss) return ot_error(OTTER_ERR_ARGUMENT, "add_gradients needs a loss tensor");
    ot_grad g = {.loss = o->loss};
    otter_status s = otter_model_clone(&g.m, m);
    if (s == OTTER_OK) s = otter_graph_topo_sort(g.m->graph);
    if (s == OTTER_OK) s = ot_grad_unroll_loops(g.m, o);
    if (s == OTTER_OK) s = otter_model_clone(&g.typed, g.m);
    if (s == OTTER_OK) s = otter_model_infer_shapes(g.typed, NULL);
    if (s == OTTER_OK) s = ot_grad_expose_captures(g.m->graph);
    if (s == OTTER_OK) s = fuse_silu(g.m->graph);
    if (s != OTTER_OK) {
        otter_model_free(g.m);
        builder_free(&g);
        return ot_error_context(s, "building gradients: ");
    }
    g.gr = g.m->graph;
    build(&g, o, g.gr->n_nodes);
    /* the domains of the gradient operators, imported at version 1 (also when only a subgraph uses them) */
    static const char *const rule_domains[] = {"com.microsoft", "com.otter"};
    for (size_t d = 0; d < 2 && !ot_grad_failed(&g); d++)
        if (otter_model_opset(g.m, rule_domains[d]) == 0 && uses_domain(g.gr, rule_domains[d]) &&
            otter_model_set_opset(g.m, rule_domains[d], 1) != OTTER_OK)
            nomem(&g);
    ot_grad_hide_captures(g.m->graph);
    s = g.status;
    if (s == OTTER_OK) {
        otter_model tmp = *m;
        *m = *g.m;
        *g.m = tmp;
    } else {
        ot_error(s, "%s", g.message);
    }
    otter_model_free(g.m);
    builder_free(&g);
    return s;
}
