/* Graph structure (onnx/checker.cc check_graph, check_value_info, check_tensor, check_attribute):
 * names, scopes, definitions before use, initializers, attributes and subgraphs. */
#include "check/check_internal.h"

#include <stdio.h>
#include <string.h>

#include "check/schema.h"
#include "core/core.h"

/* ---- name sets and lexical scopes ---------------------------------------------------------- */

const char *ot_scope_name_type(const ot_strmap *m, const char *key) {
    intptr_t v;
    return ot_strmap_get(m, key, &v) ? (const char *)v : NULL;
}

bool ot_scope_has_any(const ot_scope *s, const char *name) {
    for (; s; s = s->parent)
        if (ot_strmap_has(&s->names, name)) return true;
    return false;
}

const char *ot_scope_type(const ot_scope *s, const char *name) {
    for (; s; s = s->parent) {
        intptr_t t;
        if (ot_strmap_get(&s->names, name, &t)) return (const char *)t;
    }
    return NULL;
}

/* ---- values, tensors, attributes ------------------------------------------------------------ */

const char *ot_check_kind_name(otter_type_kind k) {
    switch (k) {
    case OTTER_TYPE_TENSOR:
        return "tensor";
    case OTTER_TYPE_SEQUENCE:
        return "sequence";
    case OTTER_TYPE_MAP:
        return "map";
    case OTTER_TYPE_OPTIONAL:
        return "optional";
    case OTTER_TYPE_SPARSE_TENSOR:
        return "sparse tensor";
    default:
        return "untyped";
    }
}

/* check_value_info: graph inputs and outputs. what: "input" / "output". */
static void check_value_info(ot_checker *c, const otter_value *v, const char *what, bool main_graph) {
    if (ot_str_empty(v->name)) {
        ot_check_problem(c, NULL, 0, "graph %s has an empty name", what);
        return;
    }
    if (!main_graph) return; /* onnx relaxes this for subgraph inputs and outputs */
    const otter_type *t = &v->type;
    if (!v->has_type || t->kind == OTTER_TYPE_NONE) {
        ot_check_problem(c, NULL, 0, "graph %s '%s' has no type", what, v->name);
        return;
    }
    switch (t->kind) {
    case OTTER_TYPE_TENSOR:
    case OTTER_TYPE_SPARSE_TENSOR:
        if (!t->has_elem_type)
            ot_check_problem(c, NULL, 0, "graph %s '%s' (%s) has no element type", what, v->name,
                             ot_check_kind_name(t->kind));
        else if (t->rank < 0)
            ot_check_problem(c, NULL, 0, "graph %s '%s' (%s) has no shape", what, v->name, ot_check_kind_name(t->kind));
        break;
    case OTTER_TYPE_SEQUENCE:
    case OTTER_TYPE_OPTIONAL:
        if (t->elem == NULL)
            ot_check_problem(c, NULL, 0, "graph %s '%s' (%s) has no element type", what, v->name,
                             ot_check_kind_name(t->kind));
        break;
    case OTTER_TYPE_MAP:
        if (!t->has_elem_type) ot_check_problem(c, NULL, 0, "graph %s '%s' (map) has no key type", what, v->name);
        if (t->elem == NULL) ot_check_problem(c, NULL, 0, "graph %s '%s' (map) has no value type", what, v->name);
        break;
    default:
        break;
    }
}

/* check_tensor, on what the loader kept (it already refused data that does not match dims). */
static void check_tensor(ot_checker *c, const otter_node *n, size_t ni, const otter_tensor *t, const char *what) {
    const char *name = t->name ? t->name : "";
    if (t->dtype == OTTER_DTYPE_UNDEFINED || otter_dtype_name(t->dtype) == NULL ||
        ot_type_elem_name(t->dtype) == NULL) {
        ot_check_problem(c, n, ni, "%s '%s' has undefined data type %d", what, name, (int)t->dtype);
        return;
    }
    if (t->rank < 0 || t->rank > OTTER_MAX_RANK) {
        ot_check_problem(c, n, ni, "%s '%s' has invalid rank %d", what, name, t->rank);
        return;
    }
    for (int i = 0; i < t->rank; i++)
        if (t->dims[i] < 0) {
            ot_check_problem(c, n, ni, "%s '%s' has negative dimension %d (%lld)", what, name, i,
                             (long long)t->dims[i]);
            return;
        }
    if (otter_tensor_numel(t) > 0 && t->data == NULL)
        ot_check_problem(c, n, ni, "%s '%s' has %lld elements but no data", what, name,
                         (long long)otter_tensor_numel(t));
}

static otter_status push_prefix(ot_checker *c, const otter_node *n, size_t ni, const char *attr, size_t gi, bool many,
                                char **saved) {
    char *p;
    if (!ot_str_empty(n->name))
        p = many ? ot_sprintf("%snode '%s' (%s), attribute '%s'[%zu]: ", c->prefix, n->name, n->op_type, attr, gi)
                 : ot_sprintf("%snode '%s' (%s), attribute '%s': ", c->prefix, n->name, n->op_type, attr);
    else
        p = many ? ot_sprintf("%snode #%zu (%s), attribute '%s'[%zu]: ", c->prefix, ni, n->op_type, attr, gi)
                 : ot_sprintf("%snode #%zu (%s), attribute '%s': ", c->prefix, ni, n->op_type, attr);
    if (p == NULL) {
        c->fatal = OTTER_ERR_NOMEM;
        return OTTER_ERR_NOMEM;
    }
    *saved = c->prefix;
    c->prefix = p;
    return OTTER_OK;
}

static void pop_prefix(ot_checker *c, char *saved) {
    ot_free(c->prefix);
    c->prefix = saved;
}

/* check_attribute: well-formedness, independent of any schema; recurses into subgraphs, which
 * see the names visible to the node (scope). */
void ot_check_attribute(ot_checker *c, const otter_node *n, size_t ni, const otter_attr *a, const ot_scope *scope,
                        bool main_graph) {
    if (ot_str_empty(a->name)) {
        ot_check_problem(c, n, ni, "an attribute has an empty name");
        return;
    }
    if (c->ir_version >= 2 && !a->has_type) {
        ot_check_problem(c, n, ni, "attribute '%s' has no type", a->name);
        return;
    }
    struct {
        bool set;
        otter_attr_type type;
    } fields[] = {
        {a->has_f, OTTER_ATTR_FLOAT},
        {a->has_i, OTTER_ATTR_INT},
        {a->has_s, OTTER_ATTR_STRING},
        {a->t != NULL, OTTER_ATTR_TENSOR},
        {a->g != NULL, OTTER_ATTR_GRAPH},
        {a->tp.data != NULL, OTTER_ATTR_TYPE_PROTO},
        {a->sparse_tensor.data != NULL, OTTER_ATTR_SPARSE_TENSOR},
        {a->n_floats > 0, OTTER_ATTR_FLOATS},
        {a->n_ints > 0, OTTER_ATTR_INTS},
        {a->n_strings > 0, OTTER_ATTR_STRINGS},
        {a->n_tensors > 0, OTTER_ATTR_TENSORS},
        {a->n_graphs > 0, OTTER_ATTR_GRAPHS},
        {a->n_sparse_tensors > 0, OTTER_ATTR_SPARSE_TENSORS},
        {a->n_type_protos > 0, OTTER_ATTR_TYPE_PROTOS},
    };
    int used = 0;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (!fields[i].set) continue;
        used++;
        if (a->has_type && a->type != fields[i].type) {
            ot_check_problem(c, n, ni, "attribute '%s' has type %s but holds a %s value", a->name,
                             otter_attr_type_name(a->type), otter_attr_type_name(fields[i].type));
            return;
        }
    }
    if (used > 1) {
        ot_check_problem(c, n, ni, "attribute '%s' holds more than one value field", a->name);
        return;
    }
    if (!main_graph && a->ref_attr_name && used != 0) {
        ot_check_problem(c, n, ni, "attribute '%s' refers to parent attribute '%s' but also holds a value", a->name,
                         a->ref_attr_name);
        return;
    }
    if (a->t) {
        char what[300];
        snprintf(what, sizeof what, "attribute '%s': tensor", a->name);
        check_tensor(c, n, ni, a->t, what);
    }
    for (size_t i = 0; i < a->n_tensors; i++) {
        char what[300];
        snprintf(what, sizeof what, "attribute '%s': tensor %zu", a->name, i);
        check_tensor(c, n, ni, a->tensors[i], what);
    }
    if (a->g) {
        char *saved;
        if (push_prefix(c, n, ni, a->name, 0, false, &saved) != OTTER_OK) return;
        ot_check_graph(c, a->g, scope, false);
        pop_prefix(c, saved);
    }
    for (size_t i = 0; i < a->n_graphs && !ot_check_stopped(c); i++) {
        char *saved;
        if (push_prefix(c, n, ni, a->name, i, true, &saved) != OTTER_OK) return;
        ot_check_graph(c, a->graphs[i], scope, false);
        pop_prefix(c, saved);
    }
}

/* ---- graphs (check_graph) ------------------------------------------------------------------ */

void ot_check_graph(ot_checker *c, const otter_graph *g, const ot_scope *parent, bool main_graph) {
    if (ot_str_empty(g->name)) ot_check_problem(c, NULL, 0, "graph has no name");
    for (size_t i = 0; i < g->n_inputs && !ot_check_stopped(c); i++)
        check_value_info(c, &g->inputs[i], "input", main_graph);
    for (size_t i = 0; i < g->n_outputs && !ot_check_stopped(c); i++)
        check_value_info(c, &g->outputs[i], "output", main_graph);
    if (ot_check_stopped(c)) return;

    ot_scope scope = {parent, {0}};
    ot_strmap inits = {0};
    for (size_t i = 0; i < g->n_inputs && !ot_check_stopped(c); i++) {
        const char *name = g->inputs[i].name;
        if (ot_str_empty(name)) continue;
        if (ot_strmap_has(&scope.names, name)) {
            ot_check_problem(c, NULL, 0, "graph input '%s' is declared more than once", name);
            continue;
        }
        if (ot_strmap_put(&scope.names, name, 0) != OTTER_OK) c->fatal = OTTER_ERR_NOMEM;
    }
    for (size_t i = 0; i < g->n_initializers && !ot_check_stopped(c); i++) {
        const otter_tensor *t = g->initializers[i];
        if (ot_str_empty(t->name)) {
            ot_check_problem(c, NULL, 0, "initializer %zu has no name", i);
            continue;
        }
        if (ot_strmap_has(&inits, t->name)) {
            ot_check_problem(c, NULL, 0, "initializer '%s' is defined more than once", t->name);
            continue;
        }
        if (ot_strmap_put(&inits, t->name, 0) != OTTER_OK) {
            c->fatal = OTTER_ERR_NOMEM;
            break;
        }
        check_tensor(c, NULL, 0, t, "initializer");
        if (c->ir_version <= 3) {
            /* Initializers are a subset of the graph inputs up to IR version 3. */
            if (!ot_strmap_has(&scope.names, t->name))
                ot_check_problem(c, NULL, 0,
                                 "initializer '%s' is not a graph input (required for ir_version %lld <= 3)", t->name,
                                 (long long)c->ir_version);
        } else if (ot_strmap_put(&scope.names, t->name, 0) != OTTER_OK) {
            c->fatal = OTTER_ERR_NOMEM;
        }
    }
    for (size_t i = 0; i < g->n_sparse_initializers && !ot_check_stopped(c); i++) {
        otter_dtype dt;
        char *name = ot_check_sparse_initializer_name(&g->sparse_initializers[i], &dt);
        const char *kept = name ? ot_check_keep_string(c, name) : NULL;
        ot_free(name);
        if (ot_check_stopped(c)) break;
        if (ot_str_empty(kept)) {
            ot_check_problem(c, NULL, 0, "sparse initializer %zu has no name", i);
            continue;
        }
        if (ot_strmap_has(&inits, kept)) {
            ot_check_problem(c, NULL, 0, "sparse initializer '%s' has the name of another initializer", kept);
            continue;
        }
        if (ot_strmap_put(&inits, kept, 0) != OTTER_OK || ot_strmap_put(&scope.names, kept, 0) != OTTER_OK)
            c->fatal = OTTER_ERR_NOMEM;
    }
    for (size_t ni = 0; ni < g->n_nodes && !ot_check_stopped(c); ni++) {
        const otter_node *n = g->nodes[ni];
        for (size_t i = 0; i < n->n_inputs; i++) {
            const char *in = n->inputs[i];
            if (ot_str_empty(in)) continue; /* an omitted optional input */
            if (!ot_scope_has_any(&scope, in)) {
                ptrdiff_t later = otter_graph_find_producer(g, in);
                if (later > (ptrdiff_t)ni)
                    ot_check_problem(c, n, ni,
                                     "input '%s' is used before it is produced (by node %zd; nodes must be in "
                                     "topological order)",
                                     in, later);
                else if (later == (ptrdiff_t)ni)
                    ot_check_problem(c, n, ni, "input '%s' is the node's own output (a cycle)", in);
                else
                    ot_check_problem(c, n, ni,
                                     "input '%s' is not defined (not a graph input, initializer or output of an "
                                     "earlier node)",
                                     in);
            }
        }
        if (ot_check_stopped(c)) break;
        ot_check_node(c, n, ni, &scope, main_graph);
        for (size_t i = 0; i < n->n_outputs && !ot_check_stopped(c); i++) {
            const char *out = n->outputs[i];
            if (ot_str_empty(out)) continue; /* an omitted optional output */
            if (ot_scope_has_any(&scope, out)) {
                ot_check_problem(c, n, ni, "output '%s' is already defined (each tensor must be defined once)", out);
                continue;
            }
            if (ot_strmap_put(&scope.names, out, 0) != OTTER_OK) c->fatal = OTTER_ERR_NOMEM;
        }
    }
    ot_strmap_free(&inits);
    ot_strmap_free(&scope.names);
}
