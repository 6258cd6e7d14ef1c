/* The in-memory model: construction, ownership, copies and the basic editing API. */
#include <string.h>

#include "core/core.h"
#include "core/proto_extra.h"
#include "otter/ir.h"

/* ---- small owned-array helpers ---------------------------------------------------------- */

static void free_bytes_array(otter_bytes *a, size_t n) {
    for (size_t i = 0; i < n; i++) ot_free(a[i].data);
    ot_free(a);
}

static otter_status bytes_copy(otter_bytes *dst, const otter_bytes *src) {
    dst->len = src->len;
    dst->data = NULL;
    if (!src->data) return OTTER_OK;
    dst->data = ot_strndup(src->data, src->len);
    return dst->data ? OTTER_OK : OT_NOMEM();
}

static otter_status bytes_array_copy(otter_bytes **dst, const otter_bytes *src, size_t n) {
    *dst = NULL;
    if (!n) return OTTER_OK;
    if (!(*dst = ot_calloc(n, sizeof **dst))) return OT_NOMEM();
    for (size_t i = 0; i < n; i++) OT_TRY(bytes_copy(&(*dst)[i], &src[i]));
    return OTTER_OK;
}

static otter_status dup_str(char **dst, const char *src) {
    *dst = NULL;
    if (!src) return OTTER_OK;
    *dst = ot_strdup(src);
    return *dst ? OTTER_OK : OT_NOMEM();
}

/* Replace an owned string. */
static otter_status set_str(char **field, const char *value) {
    char *copy;
    OT_TRY(dup_str(&copy, value));
    ot_free(*field);
    *field = copy;
    return OTTER_OK;
}

static otter_status memdup(void **dst, const void *src, size_t n, size_t elem) {
    *dst = NULL;
    if (!n) return OTTER_OK;
    size_t bytes;
    if (!ot_mul_size(n, elem, &bytes) || !(*dst = ot_malloc(bytes))) return OT_NOMEM();
    memcpy(*dst, src, bytes);
    return OTTER_OK;
}

static otter_status clone_extra(struct otter_proto_extra **dst, const struct otter_proto_extra *src) {
    *dst = NULL;
    if (!src) return OTTER_OK;
    *dst = ot_proto_extra_clone(src);
    return *dst ? OTTER_OK : OT_NOMEM();
}

/* ---- types ------------------------------------------------------------------------------ */

void otter_type_clear(otter_type *t) {
    if (!t) return;
    for (int i = 0; i < t->rank; i++) {
        ot_free(t->dims[i].param);
        ot_free(t->dims[i].denotation);
    }
    ot_free(t->dims);
    if (t->elem) {
        otter_type_clear(t->elem);
        ot_free(t->elem);
    }
    ot_free(t->denotation);
    ot_proto_extra_free(t->extra);
    memset(t, 0, sizeof *t);
    t->rank = -1;
}

void otter_type_init_tensor(otter_type *t, otter_dtype elem, int rank, const int64_t *dims) {
    memset(t, 0, sizeof *t);
    t->rank = -1;
    otter_status s = otter_type_set_tensor(t, elem, rank, dims, NULL);
    OT_ASSERT(s == OTTER_OK || s == OTTER_ERR_NOMEM);
}

otter_status otter_type_set_tensor(otter_type *t, otter_dtype elem, int rank, const int64_t *dims,
                                   const char *const *params) {
    otter_type n = {.kind = OTTER_TYPE_TENSOR, .elem_type = elem, .has_elem_type = true, .rank = rank};
    if (rank > 0) {
        if (!(n.dims = ot_calloc((size_t)rank, sizeof *n.dims))) return OT_NOMEM();
        for (int i = 0; i < rank; i++) {
            n.dims[i].value = dims ? dims[i] : -1;
            if (n.dims[i].value < 0) {
                n.dims[i].value = -1;
                if (params && params[i] && !(n.dims[i].param = ot_strdup(params[i]))) {
                    otter_type_clear(&n);
                    return OT_NOMEM();
                }
            }
        }
    }
    otter_type_clear(t);
    *t = n;
    return OTTER_OK;
}

otter_status otter_type_copy(otter_type *dst, const otter_type *src) {
    otter_type n = *src;
    n.dims = NULL;
    n.elem = NULL;
    n.denotation = NULL;
    n.extra = NULL;
    int rank = src->rank;
    n.rank = -1; /* so a failed copy clears cleanly */
    otter_status s = OTTER_OK;
    if (rank > 0) {
        if (!(n.dims = ot_calloc((size_t)rank, sizeof *n.dims))) return OT_NOMEM();
        n.rank = rank;
        for (int i = 0; i < rank && s == OTTER_OK; i++) {
            n.dims[i].value = src->dims[i].value;
            if ((s = dup_str(&n.dims[i].param, src->dims[i].param)) == OTTER_OK)
                s = dup_str(&n.dims[i].denotation, src->dims[i].denotation);
        }
    } else {
        n.rank = rank;
    }
    if (s == OTTER_OK) s = dup_str(&n.denotation, src->denotation);
    if (s == OTTER_OK) s = clone_extra(&n.extra, src->extra);
    if (s == OTTER_OK && src->elem) {
        if (!(n.elem = ot_calloc(1, sizeof *n.elem)))
            s = OT_NOMEM();
        else
            s = otter_type_copy(n.elem, src->elem);
    }
    if (s != OTTER_OK) {
        otter_type_clear(&n);
        return s;
    }
    *dst = n;
    return OTTER_OK;
}

bool otter_type_equal(const otter_type *a, const otter_type *b) {
    if (a->kind != b->kind || a->elem_type != b->elem_type || a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i].value != b->dims[i].value || !ot_streq(a->dims[i].param, b->dims[i].param)) return false;
    if (!a->elem || !b->elem) return a->elem == b->elem;
    return otter_type_equal(a->elem, b->elem);
}

/* ---- attributes ------------------------------------------------------------------------- */

const char *otter_attr_type_name(otter_attr_type t) {
    static const char *names[] = {"UNDEFINED",      "FLOAT",      "INT",        "STRING",  "TENSOR", "GRAPH",
                                  "FLOATS",         "INTS",       "STRINGS",    "TENSORS", "GRAPHS", "SPARSE_TENSOR",
                                  "SPARSE_TENSORS", "TYPE_PROTO", "TYPE_PROTOS"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "UNKNOWN";
}

static void attr_clear(otter_attr *a) {
    ot_free(a->name);
    ot_free(a->ref_attr_name);
    ot_free(a->doc_string);
    ot_free(a->s.data);
    otter_tensor_free(a->t);
    otter_graph_free(a->g);
    ot_free(a->floats);
    ot_free(a->ints);
    free_bytes_array(a->strings, a->n_strings);
    for (size_t i = 0; i < a->n_tensors; i++) otter_tensor_free(a->tensors[i]);
    ot_free(a->tensors);
    for (size_t i = 0; i < a->n_graphs; i++) otter_graph_free(a->graphs[i]);
    ot_free(a->graphs);
    ot_free(a->sparse_tensor.data);
    ot_free(a->tp.data);
    free_bytes_array(a->sparse_tensors, a->n_sparse_tensors);
    free_bytes_array(a->type_protos, a->n_type_protos);
    ot_proto_extra_free(a->extra);
    memset(a, 0, sizeof *a);
}

static otter_status attr_copy(otter_attr *dst, const otter_attr *src) {
    otter_attr n = *src;
    /* Zero every owned pointer first so a partial copy can be cleared. */
    n.name = n.ref_attr_name = n.doc_string = NULL;
    n.s.data = NULL;
    n.t = NULL;
    n.g = NULL;
    n.floats = NULL;
    n.ints = NULL;
    n.strings = NULL;
    n.tensors = NULL;
    n.graphs = NULL;
    n.sparse_tensor.data = n.tp.data = NULL;
    n.sparse_tensors = n.type_protos = NULL;
    n.extra = NULL;
    n.n_strings = n.n_tensors = n.n_graphs = n.n_sparse_tensors = n.n_type_protos = 0;
    otter_status s = OTTER_OK;
#define STEP(expr)                                                                                                     \
    if (s == OTTER_OK) s = (expr)
    STEP(dup_str(&n.name, src->name));
    STEP(dup_str(&n.ref_attr_name, src->ref_attr_name));
    STEP(dup_str(&n.doc_string, src->doc_string));
    STEP(bytes_copy(&n.s, &src->s));
    if (src->t) STEP(otter_tensor_clone(&n.t, src->t));
    if (src->g) STEP(otter_graph_clone(&n.g, src->g));
    STEP(memdup((void **)&n.floats, src->floats, src->n_floats, sizeof(float)));
    STEP(memdup((void **)&n.ints, src->ints, src->n_ints, sizeof(int64_t)));
    STEP(bytes_array_copy(&n.strings, src->strings, src->n_strings));
    if (s == OTTER_OK) n.n_strings = src->n_strings;
    if (s == OTTER_OK && src->n_tensors) {
        if (!(n.tensors = ot_calloc(src->n_tensors, sizeof *n.tensors))) s = OT_NOMEM();
        for (; s == OTTER_OK && n.n_tensors < src->n_tensors; n.n_tensors++)
            s = otter_tensor_clone(&n.tensors[n.n_tensors], src->tensors[n.n_tensors]);
    }
    if (s == OTTER_OK && src->n_graphs) {
        if (!(n.graphs = ot_calloc(src->n_graphs, sizeof *n.graphs))) s = OT_NOMEM();
        for (; s == OTTER_OK && n.n_graphs < src->n_graphs; n.n_graphs++)
            s = otter_graph_clone(&n.graphs[n.n_graphs], src->graphs[n.n_graphs]);
    }
    STEP(bytes_copy(&n.sparse_tensor, &src->sparse_tensor));
    STEP(bytes_copy(&n.tp, &src->tp));
    STEP(bytes_array_copy(&n.sparse_tensors, src->sparse_tensors, src->n_sparse_tensors));
    if (s == OTTER_OK) n.n_sparse_tensors = src->n_sparse_tensors;
    STEP(bytes_array_copy(&n.type_protos, src->type_protos, src->n_type_protos));
    if (s == OTTER_OK) n.n_type_protos = src->n_type_protos;
    STEP(clone_extra(&n.extra, src->extra));
#undef STEP
    if (s != OTTER_OK) {
        attr_clear(&n);
        return s;
    }
    *dst = n;
    return OTTER_OK;
}

/* ---- nodes ------------------------------------------------------------------------------ */

void otter_node_free(otter_node *n) {
    if (!n) return;
    ot_free(n->name);
    ot_free(n->op_type);
    ot_free(n->domain);
    ot_free(n->overload);
    ot_free(n->doc_string);
    for (size_t i = 0; i < n->n_inputs; i++) ot_free(n->inputs[i]);
    ot_free(n->inputs);
    for (size_t i = 0; i < n->n_outputs; i++) ot_free(n->outputs[i]);
    ot_free(n->outputs);
    for (size_t i = 0; i < n->n_attrs; i++) attr_clear(&n->attrs[i]);
    ot_free(n->attrs);
    ot_proto_extra_free(n->extra);
    ot_free(n);
}

static otter_status str_array_copy(char ***dst, const char *const *src, size_t n) {
    *dst = NULL;
    if (!n) return OTTER_OK;
    if (!(*dst = ot_calloc(n, sizeof **dst))) return OT_NOMEM();
    for (size_t i = 0; i < n; i++)
        if (!((*dst)[i] = ot_strdup(src[i] ? src[i] : ""))) return OT_NOMEM();
    return OTTER_OK;
}

otter_status otter_node_create(otter_node **out, const char *op_type, const char *name, size_t n_inputs,
                               const char *const *inputs, size_t n_outputs, const char *const *outputs) {
    *out = NULL;
    if (ot_str_empty(op_type)) return ot_error(OTTER_ERR_ARGUMENT, "a node needs an operator type");
    otter_node *n = ot_calloc(1, sizeof *n);
    if (!n) return OT_NOMEM();
    otter_status s = dup_str(&n->op_type, op_type);
    if (s == OTTER_OK) s = dup_str(&n->name, name);
    if (s == OTTER_OK && (s = str_array_copy(&n->inputs, inputs, n_inputs)) == OTTER_OK)
        n->n_inputs = n_inputs;
    else if (n->inputs)
        n->n_inputs = n_inputs; /* partially filled: free what is there */
    if (s == OTTER_OK && (s = str_array_copy(&n->outputs, outputs, n_outputs)) == OTTER_OK)
        n->n_outputs = n_outputs;
    else if (n->outputs)
        n->n_outputs = n_outputs;
    if (s != OTTER_OK) {
        otter_node_free(n);
        return s;
    }
    *out = n;
    return OTTER_OK;
}

otter_status otter_node_clone(otter_node **out, const otter_node *src) {
    OT_TRY(otter_node_create(out, src->op_type, src->name, src->n_inputs, (const char *const *)src->inputs,
                             src->n_outputs, (const char *const *)src->outputs));
    otter_node *n = *out;
    otter_status s = dup_str(&n->domain, src->domain);
    if (s == OTTER_OK) s = dup_str(&n->overload, src->overload);
    if (s == OTTER_OK) s = dup_str(&n->doc_string, src->doc_string);
    if (s == OTTER_OK) s = clone_extra(&n->extra, src->extra);
    if (s == OTTER_OK && src->n_attrs) {
        if (!(n->attrs = ot_calloc(src->n_attrs, sizeof *n->attrs))) s = OT_NOMEM();
        for (; s == OTTER_OK && n->n_attrs < src->n_attrs; n->n_attrs++)
            s = attr_copy(&n->attrs[n->n_attrs], &src->attrs[n->n_attrs]);
    }
    if (s != OTTER_OK) {
        otter_node_free(n);
        *out = NULL;
    }
    return s;
}

otter_status otter_node_set_domain(otter_node *n, const char *domain) { return set_str(&n->domain, domain); }

otter_attr *otter_node_attr_mut(otter_node *n, const char *name) {
    for (size_t i = 0; i < n->n_attrs; i++)
        if (ot_streq(n->attrs[i].name, name)) return &n->attrs[i];
    return NULL;
}

const otter_attr *otter_node_attr(const otter_node *n, const char *name) {
    return otter_node_attr_mut((otter_node *)n, name);
}

/* A fresh (cleared) attribute slot named `name`, replacing any attribute of that name. */
static otter_status attr_slot(otter_node *n, const char *name, otter_attr_type type, otter_attr **out) {
    otter_attr *a = otter_node_attr_mut(n, name);
    if (a) {
        attr_clear(a);
    } else {
        otter_attr *grown = ot_realloc(n->attrs, (n->n_attrs + 1) * sizeof *grown);
        if (!grown) return OT_NOMEM();
        n->attrs = grown;
        a = &n->attrs[n->n_attrs++];
        memset(a, 0, sizeof *a);
    }
    if (!(a->name = ot_strdup(name))) {
        /* Leave the node consistent: drop the half-made slot (it is the last or was cleared). */
        *a = n->attrs[--n->n_attrs];
        return OT_NOMEM();
    }
    a->type = type;
    a->has_type = true;
    *out = a;
    return OTTER_OK;
}

otter_status otter_node_set_attr_int(otter_node *n, const char *name, int64_t v) {
    otter_attr *a = NULL;
    OT_TRY(attr_slot(n, name, OTTER_ATTR_INT, &a));
    a->i = v;
    a->has_i = true;
    return OTTER_OK;
}

otter_status otter_node_set_attr_float(otter_node *n, const char *name, float v) {
    otter_attr *a = NULL;
    OT_TRY(attr_slot(n, name, OTTER_ATTR_FLOAT, &a));
    a->f = v;
    a->has_f = true;
    return OTTER_OK;
}

otter_status otter_node_set_attr_string(otter_node *n, const char *name, const char *v) {
    otter_attr *a = NULL;
    OT_TRY(attr_slot(n, name, OTTER_ATTR_STRING, &a));
    a->has_s = true;
    a->s.len = strlen(v);
    return (a->s.data = ot_strdup(v)) ? OTTER_OK : OT_NOMEM();
}

otter_status otter_node_set_attr_ints(otter_node *n, const char *name, size_t count, const int64_t *v) {
    otter_attr *a = NULL;
    OT_TRY(attr_slot(n, name, OTTER_ATTR_INTS, &a));
    OT_TRY(memdup((void **)&a->ints, v, count, sizeof *v));
    a->n_ints = count;
    return OTTER_OK;
}

otter_status otter_node_set_attr_floats(otter_node *n, const char *name, size_t count, const float *v) {
    otter_attr *a = NULL;
    OT_TRY(attr_slot(n, name, OTTER_ATTR_FLOATS, &a));
    OT_TRY(memdup((void **)&a->floats, v, count, sizeof *v));
    a->n_floats = count;
    return OTTER_OK;
}

otter_status otter_node_set_attr_strings(otter_node *n, const char *name, size_t count, const char *const *v) {
    otter_attr *a = NULL;
    OT_TRY(attr_slot(n, name, OTTER_ATTR_STRINGS, &a));
    if (!count) return OTTER_OK;
    if (!(a->strings = ot_calloc(count, sizeof *a->strings))) return OT_NOMEM();
    for (; a->n_strings < count; a->n_strings++) {
        otter_bytes *b = &a->strings[a->n_strings];
        b->len = strlen(v[a->n_strings]);
        if (!(b->data = ot_strdup(v[a->n_strings]))) return OT_NOMEM();
    }
    return OTTER_OK;
}

otter_status otter_node_set_attr_tensor(otter_node *n, const char *name, otter_tensor *t) {
    otter_attr *a = NULL;
    otter_status s = attr_slot(n, name, OTTER_ATTR_TENSOR, &a);
    if (s != OTTER_OK) {
        otter_tensor_free(t);
        return s;
    }
    a->t = t;
    return OTTER_OK;
}

otter_status otter_node_set_attr_graph(otter_node *n, const char *name, otter_graph *g) {
    otter_attr *a = NULL;
    otter_status s = attr_slot(n, name, OTTER_ATTR_GRAPH, &a);
    if (s != OTTER_OK) {
        otter_graph_free(g);
        return s;
    }
    a->g = g;
    return OTTER_OK;
}

otter_status otter_node_set_input(otter_node *n, size_t index, const char *name) {
    if (index >= n->n_inputs)
        return ot_error(OTTER_ERR_ARGUMENT, "node '%s' (%s) has %zu inputs, no input %zu", n->name ? n->name : "",
                        n->op_type, n->n_inputs, index);
    return set_str(&n->inputs[index], name ? name : "");
}

otter_status otter_node_add_input(otter_node *n, const char *name) {
    char *copy = ot_strdup(name ? name : "");
    char **grown = copy ? ot_realloc(n->inputs, (n->n_inputs + 1) * sizeof *grown) : NULL;
    if (!grown) {
        ot_free(copy);
        return OT_NOMEM();
    }
    n->inputs = grown;
    n->inputs[n->n_inputs++] = copy;
    return OTTER_OK;
}

int64_t otter_node_attr_int(const otter_node *n, const char *name, int64_t def) {
    const otter_attr *a = otter_node_attr(n, name);
    return a && a->type == OTTER_ATTR_INT ? a->i : def;
}

float otter_node_attr_float(const otter_node *n, const char *name, float def) {
    const otter_attr *a = otter_node_attr(n, name);
    return a && a->type == OTTER_ATTR_FLOAT ? a->f : def;
}

const char *otter_node_attr_string(const otter_node *n, const char *name, const char *def) {
    const otter_attr *a = otter_node_attr(n, name);
    return a && a->type == OTTER_ATTR_STRING && a->s.data ? a->s.data : def;
}

/* ---- values ----------------------------------------------------------------------------- */

static void value_clear(otter_value *v) {
    ot_free(v->name);
    ot_free(v->doc_string);
    otter_type_clear(&v->type);
    ot_proto_extra_free(v->extra);
    memset(v, 0, sizeof *v);
}

static otter_status value_copy(otter_value *dst, const otter_value *src) {
    otter_value n = {.has_type = src->has_type};
    n.type.rank = -1;
    otter_status s = dup_str(&n.name, src->name);
    if (s == OTTER_OK) s = dup_str(&n.doc_string, src->doc_string);
    if (s == OTTER_OK) s = otter_type_copy(&n.type, &src->type);
    if (s == OTTER_OK) s = clone_extra(&n.extra, src->extra);
    if (s != OTTER_OK) {
        value_clear(&n);
        return s;
    }
    *dst = n;
    return OTTER_OK;
}

/* ---- graphs ----------------------------------------------------------------------------- */

otter_status otter_graph_create(otter_graph **out, const char *name) {
    *out = ot_calloc(1, sizeof **out);
    if (!*out) return OT_NOMEM();
    if (name && !((*out)->name = ot_strdup(name))) {
        ot_free(*out);
        *out = NULL;
        return OT_NOMEM();
    }
    return OTTER_OK;
}

void otter_graph_free(otter_graph *g) {
    if (!g) return;
    ot_free(g->name);
    ot_free(g->doc_string);
    for (size_t i = 0; i < g->n_nodes; i++) otter_node_free(g->nodes[i]);
    ot_free(g->nodes);
    for (size_t i = 0; i < g->n_inputs; i++) value_clear(&g->inputs[i]);
    ot_free(g->inputs);
    for (size_t i = 0; i < g->n_outputs; i++) value_clear(&g->outputs[i]);
    ot_free(g->outputs);
    for (size_t i = 0; i < g->n_value_info; i++) value_clear(&g->value_info[i]);
    ot_free(g->value_info);
    for (size_t i = 0; i < g->n_initializers; i++) otter_tensor_free(g->initializers[i]);
    ot_free(g->initializers);
    free_bytes_array(g->sparse_initializers, g->n_sparse_initializers);
    free_bytes_array(g->quantization_annotations, g->n_quantization_annotations);
    ot_proto_extra_free(g->extra);
    ot_free(g);
}

static otter_status values_copy(otter_value **dst, size_t *n_dst, size_t *cap, const otter_value *src, size_t n) {
    if (!n) return OTTER_OK;
    OT_TRY(ot_grow((void **)dst, cap, n, sizeof **dst));
    for (; *n_dst < n; (*n_dst)++) OT_TRY(value_copy(&(*dst)[*n_dst], &src[*n_dst]));
    return OTTER_OK;
}

static otter_status graph_copy_into(otter_graph *g, const otter_graph *src) {
    OT_TRY(dup_str(&g->doc_string, src->doc_string));
    OT_TRY(clone_extra(&g->extra, src->extra));
    if (src->n_nodes) {
        OT_TRY(ot_grow((void **)&g->nodes, &g->cap_nodes, src->n_nodes, sizeof *g->nodes));
        for (; g->n_nodes < src->n_nodes; g->n_nodes++)
            OT_TRY(otter_node_clone(&g->nodes[g->n_nodes], src->nodes[g->n_nodes]));
    }
    OT_TRY(values_copy(&g->inputs, &g->n_inputs, &g->cap_inputs, src->inputs, src->n_inputs));
    OT_TRY(values_copy(&g->outputs, &g->n_outputs, &g->cap_outputs, src->outputs, src->n_outputs));
    OT_TRY(values_copy(&g->value_info, &g->n_value_info, &g->cap_value_info, src->value_info, src->n_value_info));
    if (src->n_initializers) {
        OT_TRY(ot_grow((void **)&g->initializers, &g->cap_initializers, src->n_initializers, sizeof *g->initializers));
        for (; g->n_initializers < src->n_initializers; g->n_initializers++)
            OT_TRY(otter_tensor_clone(&g->initializers[g->n_initializers], src->initializers[g->n_initializers]));
    }
    OT_TRY(bytes_array_copy(&g->sparse_initializers, src->sparse_initializers, src->n_sparse_initializers));
    g->n_sparse_initializers = src->n_sparse_initializers;
    OT_TRY(
        bytes_array_copy(&g->quantization_annotations, src->quantization_annotations, src->n_quantization_annotations));
    g->n_quantization_annotations = src->n_quantization_annotations;
    return OTTER_OK;
}

otter_status otter_graph_clone(otter_graph **out, const otter_graph *src) {
    OT_TRY(otter_graph_create(out, src->name));
    otter_status s = graph_copy_into(*out, src);
    if (s != OTTER_OK) {
        otter_graph_free(*out);
        *out = NULL;
    }
    return s;
}

static ptrdiff_t find_value(const otter_value *v, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (ot_streq(v[i].name, name)) return (ptrdiff_t)i;
    return -1;
}

ptrdiff_t otter_graph_find_input(const otter_graph *g, const char *name) {
    return find_value(g->inputs, g->n_inputs, name);
}
ptrdiff_t otter_graph_find_output(const otter_graph *g, const char *name) {
    return find_value(g->outputs, g->n_outputs, name);
}
ptrdiff_t otter_graph_find_value_info(const otter_graph *g, const char *name) {
    return find_value(g->value_info, g->n_value_info, name);
}
ptrdiff_t otter_graph_find_initializer(const otter_graph *g, const char *name) {
    for (size_t i = 0; i < g->n_initializers; i++)
        if (ot_streq(g->initializers[i]->name, name)) return (ptrdiff_t)i;
    return -1;
}
ptrdiff_t otter_graph_find_producer(const otter_graph *g, const char *name) {
    for (size_t i = 0; i < g->n_nodes; i++)
        for (size_t j = 0; j < g->nodes[i]->n_outputs; j++)
            if (ot_streq(g->nodes[i]->outputs[j], name)) return (ptrdiff_t)i;
    return -1;
}
ptrdiff_t otter_graph_find_node(const otter_graph *g, const char *node_name) {
    for (size_t i = 0; i < g->n_nodes; i++)
        if (ot_streq(g->nodes[i]->name, node_name)) return (ptrdiff_t)i;
    return -1;
}

const otter_type *otter_graph_value_type(const otter_graph *g, const char *name) {
    ptrdiff_t i;
    if ((i = otter_graph_find_input(g, name)) >= 0 && g->inputs[i].has_type) return &g->inputs[i].type;
    if ((i = otter_graph_find_output(g, name)) >= 0 && g->outputs[i].has_type) return &g->outputs[i].type;
    if ((i = otter_graph_find_value_info(g, name)) >= 0 && g->value_info[i].has_type) return &g->value_info[i].type;
    return NULL;
}

static otter_status add_value(otter_value **arr, size_t *n, size_t *cap, const char *what, const char *name,
                              otter_dtype dtype, int rank, const int64_t *dims, const char *const *params) {
    if (ot_str_empty(name)) return ot_error(OTTER_ERR_ARGUMENT, "a graph %s needs a name", what);
    if (find_value(*arr, *n, name) >= 0) return ot_error(OTTER_ERR_INVALID, "graph %s '%s' already exists", what, name);
    OT_TRY(ot_grow((void **)arr, cap, *n + 1, sizeof **arr));
    otter_value *v = &(*arr)[*n];
    memset(v, 0, sizeof *v);
    v->type.rank = -1;
    otter_status s = dup_str(&v->name, name);
    if (s == OTTER_OK) s = otter_type_set_tensor(&v->type, dtype, rank, dims, params);
    if (s != OTTER_OK) {
        value_clear(v);
        return s;
    }
    v->has_type = true;
    (*n)++;
    return OTTER_OK;
}

otter_status otter_graph_add_input(otter_graph *g, const char *name, otter_dtype dtype, int rank, const int64_t *dims,
                                   const char *const *params) {
    return add_value(&g->inputs, &g->n_inputs, &g->cap_inputs, "input", name, dtype, rank, dims, params);
}

otter_status otter_graph_add_output(otter_graph *g, const char *name, otter_dtype dtype, int rank, const int64_t *dims,
                                    const char *const *params) {
    return add_value(&g->outputs, &g->n_outputs, &g->cap_outputs, "output", name, dtype, rank, dims, params);
}

otter_status otter_graph_add_value_info(otter_graph *g, const char *name, const otter_type *type) {
    ptrdiff_t i = otter_graph_find_value_info(g, name);
    if (i >= 0) {
        otter_type copy;
        OT_TRY(otter_type_copy(&copy, type));
        otter_type_clear(&g->value_info[i].type);
        g->value_info[i].type = copy;
        g->value_info[i].has_type = true;
        return OTTER_OK;
    }
    OT_TRY(ot_grow((void **)&g->value_info, &g->cap_value_info, g->n_value_info + 1, sizeof *g->value_info));
    otter_value *v = &g->value_info[g->n_value_info];
    memset(v, 0, sizeof *v);
    otter_status s = dup_str(&v->name, name);
    if (s == OTTER_OK) s = otter_type_copy(&v->type, type);
    if (s != OTTER_OK) {
        value_clear(v);
        return s;
    }
    v->has_type = true;
    g->n_value_info++;
    return OTTER_OK;
}

static otter_status delete_value(otter_value *arr, size_t *n, const char *what, const char *name) {
    ptrdiff_t i = find_value(arr, *n, name);
    if (i < 0) return ot_error(OTTER_ERR_NOT_FOUND, "graph has no %s named '%s'", what, name);
    value_clear(&arr[i]);
    memmove(&arr[i], &arr[i + 1], (*n - (size_t)i - 1) * sizeof *arr);
    (*n)--;
    return OTTER_OK;
}

otter_status otter_graph_delete_input(otter_graph *g, const char *name) {
    return delete_value(g->inputs, &g->n_inputs, "input", name);
}
otter_status otter_graph_delete_output(otter_graph *g, const char *name) {
    return delete_value(g->outputs, &g->n_outputs, "output", name);
}

static otter_status change_value(otter_value *arr, size_t n, const char *what, const char *name, otter_dtype dtype,
                                 int rank, const int64_t *dims, const char *const *params) {
    ptrdiff_t i = find_value(arr, n, name);
    if (i < 0) return ot_error(OTTER_ERR_NOT_FOUND, "graph has no %s named '%s'", what, name);
    OT_TRY(otter_type_set_tensor(&arr[i].type, dtype, rank, dims, params));
    arr[i].has_type = true;
    return OTTER_OK;
}

otter_status otter_graph_change_input(otter_graph *g, const char *name, otter_dtype dtype, int rank,
                                      const int64_t *dims, const char *const *params) {
    return change_value(g->inputs, g->n_inputs, "input", name, dtype, rank, dims, params);
}
otter_status otter_graph_change_output(otter_graph *g, const char *name, otter_dtype dtype, int rank,
                                       const int64_t *dims, const char *const *params) {
    return change_value(g->outputs, g->n_outputs, "output", name, dtype, rank, dims, params);
}

/* True when a subgraph defines `name` itself (so outer references are shadowed). */
static bool graph_defines(const otter_graph *g, const char *name) {
    return otter_graph_find_input(g, name) >= 0 || otter_graph_find_initializer(g, name) >= 0 ||
           otter_graph_find_producer(g, name) >= 0;
}

static otter_status rename_in(char **field, const char *old_name, const char *new_name) {
    return ot_streq(*field, old_name) ? set_str(field, new_name) : OTTER_OK;
}

static otter_status rename_refs(otter_graph *g, const char *old_name, const char *new_name, bool outer_only);

static otter_status rename_in_node(otter_node *n, const char *old_name, const char *new_name, bool outer_only) {
    for (size_t j = 0; j < n->n_inputs; j++) OT_TRY(rename_in(&n->inputs[j], old_name, new_name));
    if (!outer_only)
        for (size_t j = 0; j < n->n_outputs; j++) OT_TRY(rename_in(&n->outputs[j], old_name, new_name));
    for (size_t a = 0; a < n->n_attrs; a++) {
        otter_attr *at = &n->attrs[a];
        if (at->g) OT_TRY(rename_refs(at->g, old_name, new_name, true));
        for (size_t k = 0; k < at->n_graphs; k++) OT_TRY(rename_refs(at->graphs[k], old_name, new_name, true));
    }
    return OTTER_OK;
}

/* outer_only: g is a subgraph; rename only its reads of an outer-scope tensor it does not shadow. */
static otter_status rename_refs(otter_graph *g, const char *old_name, const char *new_name, bool outer_only) {
    if (outer_only && graph_defines(g, old_name)) return OTTER_OK;
    for (size_t i = 0; i < g->n_nodes; i++) OT_TRY(rename_in_node(g->nodes[i], old_name, new_name, outer_only));
    if (outer_only) {
        for (size_t i = 0; i < g->n_outputs; i++) OT_TRY(rename_in(&g->outputs[i].name, old_name, new_name));
        return OTTER_OK;
    }
    for (size_t i = 0; i < g->n_inputs; i++) OT_TRY(rename_in(&g->inputs[i].name, old_name, new_name));
    for (size_t i = 0; i < g->n_outputs; i++) OT_TRY(rename_in(&g->outputs[i].name, old_name, new_name));
    for (size_t i = 0; i < g->n_value_info; i++) OT_TRY(rename_in(&g->value_info[i].name, old_name, new_name));
    for (size_t i = 0; i < g->n_initializers; i++) OT_TRY(rename_in(&g->initializers[i]->name, old_name, new_name));
    return OTTER_OK;
}

otter_status otter_graph_rename(otter_graph *g, const char *old_name, const char *new_name) {
    if (ot_str_empty(old_name) || ot_str_empty(new_name))
        return ot_error(OTTER_ERR_ARGUMENT, "rename needs two non-empty names");
    if (ot_streq(old_name, new_name)) return OTTER_OK;
    if (graph_defines(g, new_name) || otter_graph_find_output(g, new_name) >= 0)
        return ot_error(OTTER_ERR_INVALID, "cannot rename '%s' to '%s': '%s' already exists", old_name, new_name,
                        new_name);
    /* The names may point into the graph itself (e.g. g->outputs[0].name), which renaming frees. */
    char *from = ot_strdup(old_name), *to = ot_strdup(new_name);
    otter_status s = from && to ? rename_refs(g, from, to, false) : OT_NOMEM();
    ot_free(from);
    ot_free(to);
    return s;
}

otter_status otter_graph_add_initializer(otter_graph *g, otter_tensor *t) {
    if (ot_str_empty(t->name)) {
        otter_tensor_free(t);
        return ot_error(OTTER_ERR_ARGUMENT, "an initializer needs a name");
    }
    if (otter_graph_find_initializer(g, t->name) >= 0) {
        otter_status s = ot_error(OTTER_ERR_INVALID, "initializer '%s' already exists", t->name);
        otter_tensor_free(t);
        return s;
    }
    otter_status s =
        ot_grow((void **)&g->initializers, &g->cap_initializers, g->n_initializers + 1, sizeof *g->initializers);
    if (s != OTTER_OK) {
        otter_tensor_free(t);
        return s;
    }
    g->initializers[g->n_initializers++] = t;
    return OTTER_OK;
}

otter_status otter_graph_delete_initializer(otter_graph *g, const char *name) {
    ptrdiff_t i = otter_graph_find_initializer(g, name);
    if (i < 0) return ot_error(OTTER_ERR_NOT_FOUND, "graph has no initializer named '%s'", name);
    otter_tensor_free(g->initializers[i]);
    memmove(&g->initializers[i], &g->initializers[i + 1], (g->n_initializers - (size_t)i - 1) * sizeof(otter_tensor *));
    g->n_initializers--;
    return OTTER_OK;
}

otter_status otter_graph_add_node(otter_graph *g, otter_node *n) {
    otter_status s = ot_grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes);
    if (s != OTTER_OK) {
        otter_node_free(n);
        return s;
    }
    g->nodes[g->n_nodes++] = n;
    return OTTER_OK;
}

otter_status otter_graph_add_constant(otter_graph *g, const char *name, const otter_tensor *t) {
    otter_tensor *copy;
    OT_TRY(otter_tensor_clone(&copy, t));
    otter_node *n;
    const char *outs[] = {name};
    otter_status s = otter_node_create(&n, "Constant", name, 0, NULL, 1, outs);
    if (s != OTTER_OK) {
        otter_tensor_free(copy);
        return s;
    }
    if ((s = otter_node_set_attr_tensor(n, "value", copy)) != OTTER_OK) {
        otter_node_free(n);
        return s;
    }
    return otter_graph_add_node(g, n);
}

otter_status otter_graph_delete_node(otter_graph *g, const char *name) {
    ptrdiff_t i = otter_graph_find_node(g, name);
    if (i < 0) i = otter_graph_find_producer(g, name);
    if (i < 0) return ot_error(OTTER_ERR_NOT_FOUND, "graph has no node named (or producing) '%s'", name);
    otter_node_free(g->nodes[i]);
    memmove(&g->nodes[i], &g->nodes[i + 1], (g->n_nodes - (size_t)i - 1) * sizeof(otter_node *));
    g->n_nodes--;
    return OTTER_OK;
}

/* ---- models ----------------------------------------------------------------------------- */

static bool is_default_domain(const char *d) { return ot_str_empty(d) || strcmp(d, "ai.onnx") == 0; }

otter_status otter_model_create(otter_model **out, const char *graph_name, int64_t opset) {
    *out = NULL;
    otter_model *m = ot_calloc(1, sizeof *m);
    if (!m) return OT_NOMEM();
    m->has_ir_version = true;
    m->ir_version = 8;
    otter_status s = otter_graph_create(&m->graph, graph_name ? graph_name : "graph");
    if (s == OTTER_OK) s = otter_model_set_opset(m, "", opset);
    if (s == OTTER_OK) s = dup_str(&m->producer_name, "otter");
    if (s == OTTER_OK) s = dup_str(&m->producer_version, OTTER_VERSION);
    if (s != OTTER_OK) {
        otter_model_free(m);
        return s;
    }
    *out = m;
    return OTTER_OK;
}

void otter_model_free(otter_model *m) {
    if (!m) return;
    ot_free(m->producer_name);
    ot_free(m->producer_version);
    ot_free(m->domain);
    ot_free(m->doc_string);
    for (size_t i = 0; i < m->n_opsets; i++) {
        ot_free(m->opsets[i].domain);
        ot_proto_extra_free(m->opsets[i].extra);
    }
    ot_free(m->opsets);
    for (size_t i = 0; i < m->n_metadata; i++) {
        ot_free(m->metadata[i].key);
        ot_free(m->metadata[i].value);
    }
    ot_free(m->metadata);
    otter_graph_free(m->graph);
    free_bytes_array(m->training_info, m->n_training_info);
    free_bytes_array(m->functions, m->n_functions);
    ot_proto_extra_free(m->extra);
    ot_free(m->base_dir);
    ot_free(m);
}

otter_status otter_model_clone(otter_model **out, const otter_model *src) {
    *out = NULL;
    otter_model *m = ot_calloc(1, sizeof *m);
    if (!m) return OT_NOMEM();
    m->has_ir_version = src->has_ir_version;
    m->has_model_version = src->has_model_version;
    m->ir_version = src->ir_version;
    m->model_version = src->model_version;
    otter_status s = OTTER_OK;
#define STEP(expr)                                                                                                     \
    if (s == OTTER_OK) s = (expr)
    STEP(dup_str(&m->producer_name, src->producer_name));
    STEP(dup_str(&m->producer_version, src->producer_version));
    STEP(dup_str(&m->domain, src->domain));
    STEP(dup_str(&m->doc_string, src->doc_string));
    STEP(dup_str(&m->base_dir, src->base_dir));
    STEP(clone_extra(&m->extra, src->extra));
    if (s == OTTER_OK && src->n_opsets) {
        if (!(m->opsets = ot_calloc(src->n_opsets, sizeof *m->opsets))) s = OT_NOMEM();
        for (; s == OTTER_OK && m->n_opsets < src->n_opsets; m->n_opsets++) {
            otter_opset *d = &m->opsets[m->n_opsets];
            const otter_opset *o = &src->opsets[m->n_opsets];
            d->version = o->version;
            d->has_version = o->has_version;
            s = dup_str(&d->domain, o->domain);
            if (s == OTTER_OK) s = clone_extra(&d->extra, o->extra);
        }
    }
    if (s == OTTER_OK && src->n_metadata) {
        if (!(m->metadata = ot_calloc(src->n_metadata, sizeof *m->metadata))) s = OT_NOMEM();
        for (; s == OTTER_OK && m->n_metadata < src->n_metadata; m->n_metadata++) {
            s = dup_str(&m->metadata[m->n_metadata].key, src->metadata[m->n_metadata].key);
            if (s == OTTER_OK) s = dup_str(&m->metadata[m->n_metadata].value, src->metadata[m->n_metadata].value);
        }
    }
    if (src->graph) STEP(otter_graph_clone(&m->graph, src->graph));
    STEP(bytes_array_copy(&m->training_info, src->training_info, src->n_training_info));
    if (s == OTTER_OK) m->n_training_info = src->n_training_info;
    STEP(bytes_array_copy(&m->functions, src->functions, src->n_functions));
    if (s == OTTER_OK) m->n_functions = src->n_functions;
#undef STEP
    if (s != OTTER_OK) {
        otter_model_free(m);
        return s;
    }
    *out = m;
    return OTTER_OK;
}

int64_t otter_model_opset(const otter_model *m, const char *domain) {
    for (size_t i = 0; i < m->n_opsets; i++) {
        const char *d = m->opsets[i].domain;
        if (is_default_domain(domain) ? is_default_domain(d) : ot_streq(d, domain)) return m->opsets[i].version;
    }
    return 0;
}

otter_status otter_model_set_opset(otter_model *m, const char *domain, int64_t version) {
    for (size_t i = 0; i < m->n_opsets; i++) {
        const char *d = m->opsets[i].domain;
        if (is_default_domain(domain) ? is_default_domain(d) : ot_streq(d, domain)) {
            m->opsets[i].version = version;
            m->opsets[i].has_version = true;
            return OTTER_OK;
        }
    }
    otter_opset *grown = ot_realloc(m->opsets, (m->n_opsets + 1) * sizeof *grown);
    if (!grown) return OT_NOMEM();
    m->opsets = grown;
    otter_opset *o = &m->opsets[m->n_opsets];
    memset(o, 0, sizeof *o);
    if (!(o->domain = ot_strdup(is_default_domain(domain) ? "" : domain))) return OT_NOMEM();
    o->version = version;
    o->has_version = true;
    m->n_opsets++;
    return OTTER_OK;
}

const char *otter_model_metadata(const otter_model *m, const char *key) {
    for (size_t i = 0; m && key && i < m->n_metadata; i++)
        if (ot_streq(m->metadata[i].key, key)) return m->metadata[i].value;
    return NULL;
}

otter_status otter_model_set_metadata(otter_model *m, const char *key, const char *value) {
    for (size_t i = 0; i < m->n_metadata; i++)
        if (ot_streq(m->metadata[i].key, key)) return set_str(&m->metadata[i].value, value);
    otter_kv *grown = ot_realloc(m->metadata, (m->n_metadata + 1) * sizeof *grown);
    if (!grown) return OT_NOMEM();
    m->metadata = grown;
    otter_kv *kv = &m->metadata[m->n_metadata];
    kv->key = ot_strdup(key);
    kv->value = ot_strdup(value);
    if (!kv->key || !kv->value) {
        ot_free(kv->key);
        ot_free(kv->value);
        return OT_NOMEM();
    }
    m->n_metadata++;
    return OTTER_OK;
}
