/* The type pass of full_check: OpSchema::CheckInputOutputType over the declared and inferred types. */
#include "check/check_internal.h"

#include <stdio.h>
#include <string.h>

#include "check/schema.h"
#include "core/core.h"

/* ---- the type pass (full_check): OpSchema::CheckInputOutputType ---------------------------- */

/* The type string of a declared type, kept; NULL when incomplete. */
static const char *declared_type(ot_checker *c, const otter_type *t) {
    char buf[256];
    if (t == NULL || !ot_type_string(t, buf, sizeof buf)) return NULL;
    return ot_check_keep_string(c, buf);
}

static const char *tensor_type(ot_checker *c, const otter_tensor *t) {
    const char *e = ot_type_elem_name(t->dtype);
    if (e == NULL) return NULL;
    char buf[64];
    snprintf(buf, sizeof buf, "tensor(%s)", e);
    return ot_check_keep_string(c, buf);
}

/* The output type of a Constant node, from its value attribute (as onnx's inference gives it). */
static const char *constant_type(ot_checker *c, const otter_node *n) {
    for (size_t i = 0; i < n->n_attrs; i++) {
        const otter_attr *a = &n->attrs[i];
        if (ot_streq(a->name, "value") && a->t) return tensor_type(c, a->t);
        if (ot_streq(a->name, "value_float") || ot_streq(a->name, "value_floats")) return "tensor(float)";
        if (ot_streq(a->name, "value_int") || ot_streq(a->name, "value_ints")) return "tensor(int64)";
        if (ot_streq(a->name, "value_string") || ot_streq(a->name, "value_strings")) return "tensor(string)";
    }
    return NULL;
}

/* Types of one node's inputs against its schema; binds output types where the schema fixes them. */
static void type_node(ot_checker *c, const otter_node *n, size_t ni, ot_scope *scope) {
    const char *domain = n->domain ? n->domain : "";
    int64_t version = 0;
    const ot_schema *s = NULL;
    if (!ot_check_experimental_op(n->op_type) && strcmp(domain, "ai.onnx") != 0 &&
        ot_check_opset_lookup(c, domain, &version))
        s = ot_schema_find(domain, n->op_type, version);
    /* Subgraphs see the names (and types) visible to the node. */
    for (size_t i = 0; i < n->n_attrs && !ot_check_stopped(c); i++) {
        const otter_attr *a = &n->attrs[i];
        if (a->g) ot_check_type_graph(c, a->g, scope);
        for (size_t j = 0; j < a->n_graphs && !ot_check_stopped(c); j++) ot_check_type_graph(c, a->graphs[j], scope);
    }
    if (s == NULL || s->deprecated) return;

    /* type parameter -> bound type string; at most a handful per schema */
    const char *bound_param[16];
    const char *bound_type[16];
    size_t n_bound = 0;
    for (size_t i = 0; i < n->n_inputs && i < s->n_inputs; i++) {
        const char *in = n->inputs[i];
        if (ot_str_empty(in)) continue;
        const char *t = ot_scope_type(scope, in);
        if (t == NULL) continue;
        const ot_schema_param *p = &s->inputs[i];
        if (!ot_schema_param_allows(p, t)) {
            ot_check_problem(c, n, ni, "input %zu ('%s', tensor '%s') has type %s, which %s-%d does not allow for %s",
                             i, p->name, in, t, s->name, (int)s->since_version, p->type_str);
            return;
        }
        if (!p->homogeneous) continue;
        size_t k = 0;
        while (k < n_bound && strcmp(bound_param[k], p->type_str) != 0) k++;
        if (k < n_bound) {
            if (strcmp(bound_type[k], t) != 0) {
                ot_check_problem(c, n, ni, "input %zu ('%s', tensor '%s') has type %s but %s is already bound to %s", i,
                                 p->name, in, t, p->type_str, bound_type[k]);
                return;
            }
        } else if (n_bound < sizeof bound_param / sizeof bound_param[0]) {
            bound_param[n_bound] = p->type_str;
            bound_type[n_bound++] = t;
        }
    }
    for (size_t i = 0; i < n->n_outputs && i < s->n_outputs; i++) {
        const char *out = n->outputs[i];
        if (ot_str_empty(out)) continue;
        const ot_schema_param *p = &s->outputs[i];
        /* As onnx: the inferred type (here: declared, or written by otter's inference), else the
         * one the schema fixes (a single allowed type, or a type parameter bound by the inputs). */
        const char *t = ot_scope_name_type(&scope->names, out);
        if (t == NULL && strcmp(s->name, "Constant") == 0 && s->domain[0] == '\0') t = constant_type(c, n);
        if (t == NULL) {
            if (p->n_types == 1)
                t = p->types[0];
            else
                for (size_t k = 0; k < n_bound; k++)
                    if (strcmp(bound_param[k], p->type_str) == 0) t = bound_type[k];
            if (t == NULL) continue;
        }
        if (!ot_schema_param_allows(p, t)) {
            ot_check_problem(c, n, ni, "output %zu ('%s', tensor '%s') has type %s, which %s-%d does not allow for %s",
                             i, p->name, out, t, s->name, (int)s->since_version, p->type_str);
            return;
        }
        if (p->homogeneous) {
            size_t k = 0;
            while (k < n_bound && strcmp(bound_param[k], p->type_str) != 0) k++;
            if (k < n_bound && strcmp(bound_type[k], t) != 0) {
                ot_check_problem(c, n, ni, "output %zu ('%s', tensor '%s') has type %s but %s is bound to %s", i,
                                 p->name, out, t, p->type_str, bound_type[k]);
                return;
            }
            if (k == n_bound && n_bound < sizeof bound_param / sizeof bound_param[0]) {
                bound_param[n_bound] = p->type_str;
                bound_type[n_bound++] = t;
            }
        }
        if (ot_strmap_put(&scope->names, out, (intptr_t)t) != OTTER_OK) c->fatal = OTTER_ERR_NOMEM;
    }
}

/* The type onnx's inference holds for a name before visiting nodes: typed value_info, then graph
 * inputs, then graph outputs, the later overriding the earlier. */
static const otter_type *declared_otter_type(const otter_graph *g, const char *name) {
    for (size_t i = g->n_outputs; i-- > 0;)
        if (g->outputs[i].has_type && ot_streq(g->outputs[i].name, name)) return &g->outputs[i].type;
    for (size_t i = g->n_inputs; i-- > 0;)
        if (g->inputs[i].has_type && ot_streq(g->inputs[i].name, name)) return &g->inputs[i].type;
    for (size_t i = g->n_value_info; i-- > 0;)
        if (g->value_info[i].has_type && ot_streq(g->value_info[i].name, name)) return &g->value_info[i].type;
    return NULL;
}

/* An initializer against the declared type of the same name (checkShapesAndTypes). */
static void check_initializer_type(ot_checker *c, const otter_tensor *t, const otter_type *d) {
    if (d->kind == OTTER_TYPE_NONE) return;
    if (d->kind != OTTER_TYPE_TENSOR) {
        ot_check_problem(c, NULL, 0, "initializer '%s' is a tensor but is declared as a %s", t->name,
                         ot_check_kind_name(d->kind));
        return;
    }
    if (d->has_elem_type && d->elem_type != OTTER_DTYPE_UNDEFINED && d->elem_type != t->dtype) {
        const char *a = ot_type_elem_name(t->dtype), *b = ot_type_elem_name(d->elem_type);
        ot_check_problem(c, NULL, 0, "initializer '%s' has element type %s but is declared as %s", t->name, a ? a : "?",
                         b ? b : "?");
        return;
    }
    if (d->rank < 0) return;
    if (d->rank != t->rank) {
        ot_check_problem(c, NULL, 0, "initializer '%s' has rank %d but is declared with rank %d", t->name, t->rank,
                         d->rank);
        return;
    }
    for (int i = 0; i < t->rank; i++)
        if (d->dims[i].value >= 0 && d->dims[i].param == NULL && d->dims[i].value != t->dims[i]) {
            ot_check_problem(c, NULL, 0, "initializer '%s' has dimension %d of size %lld but is declared as %lld",
                             t->name, i, (long long)t->dims[i], (long long)d->dims[i].value);
            return;
        }
}

void ot_check_type_graph(ot_checker *c, const otter_graph *g, const ot_scope *parent) {
    ot_scope scope = {parent, {0}};
    const otter_value *lists[3] = {g->value_info, g->inputs, g->outputs};
    size_t counts[3] = {g->n_value_info, g->n_inputs, g->n_outputs};
    for (size_t l = 0; l < 3; l++)
        for (size_t i = 0; i < counts[l] && !ot_check_stopped(c); i++) {
            const otter_value *v = &lists[l][i];
            if (ot_str_empty(v->name) || !v->has_type) continue;
            if (ot_strmap_put(&scope.names, v->name, (intptr_t)declared_type(c, &v->type)) != OTTER_OK)
                c->fatal = OTTER_ERR_NOMEM;
        }
    for (size_t i = 0; i < g->n_initializers && !ot_check_stopped(c); i++) {
        const otter_tensor *t = g->initializers[i];
        if (ot_str_empty(t->name)) continue;
        const otter_type *d = declared_otter_type(g, t->name);
        if (d != NULL)
            check_initializer_type(c, t, d);
        else if (c->ir_version >= 4 && ot_strmap_put(&scope.names, t->name, (intptr_t)tensor_type(c, t)) != OTTER_OK)
            c->fatal = OTTER_ERR_NOMEM;
    }
    for (size_t i = 0; i < g->n_sparse_initializers && !ot_check_stopped(c); i++) {
        otter_dtype dt;
        char *name = ot_check_sparse_initializer_name(&g->sparse_initializers[i], &dt);
        const char *kept = name ? ot_check_keep_string(c, name) : NULL;
        ot_free(name);
        const char *e = ot_type_elem_name(dt);
        if (kept == NULL || e == NULL || declared_otter_type(g, kept) != NULL) continue;
        char buf[64];
        snprintf(buf, sizeof buf, "sparse_tensor(%s)", e);
        const char *t = ot_check_keep_string(c, buf);
        if (t && ot_strmap_put(&scope.names, kept, (intptr_t)t) != OTTER_OK) c->fatal = OTTER_ERR_NOMEM;
    }
    for (size_t ni = 0; ni < g->n_nodes && !ot_check_stopped(c); ni++) type_node(c, g->nodes[ni], ni, &scope);
    ot_strmap_free(&scope.names);
}
