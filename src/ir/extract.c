/* otter_model_extract: the sub-graph computing given outputs from given inputs. */
#include <string.h>

#include "core/core.h"
#include "ir/edit_internal.h"
#include "otter/edit.h"

typedef struct walk {
    const otter_graph *g;
    ot_strmap producer; /* tensor -> node index */
    ot_strmap given;    /* the inputs asked for */
    ot_strmap seen;     /* tensors visited */
    bool *live;
    bool *init_used;
    const char *root;   /* output being walked, for messages */
    const char *reader; /* node reading the current name, for messages */
    size_t *stack;      /* nodes whose reads are still to visit */
    size_t n_stack, cap_stack;
} walk;

static otter_status visit(const char *name, void *user) {
    walk *w = user;
    if (ot_strmap_has(&w->seen, name)) return OTTER_OK;
    OT_TRY(ot_strmap_put(&w->seen, name, 0));
    if (ot_strmap_has(&w->given, name)) return OTTER_OK;
    intptr_t p;
    if (ot_strmap_get(&w->producer, name, &p)) {
        if (!w->live[p]) {
            w->live[p] = true;
            OT_TRY(ot_grow((void **)&w->stack, &w->cap_stack, w->n_stack + 1, sizeof *w->stack));
            w->stack[w->n_stack++] = p;
        }
        return OTTER_OK;
    }
    ptrdiff_t ii = otter_graph_find_initializer(w->g, name);
    if (ii >= 0) {
        w->init_used[ii] = true;
        return OTTER_OK;
    }
    if (otter_graph_find_input(w->g, name) >= 0)
        return ot_error(OTTER_ERR_INVALID,
                        "output '%s' is not computable from the given inputs: it depends on graph input '%s'%s%s%s",
                        w->root, name, w->reader ? " (read by node '" : "", w->reader ? w->reader : "",
                        w->reader ? "')" : "");
    return ot_error(OTTER_ERR_INVALID, "output '%s' depends on '%s'%s%s%s, which nothing in the graph defines", w->root,
                    name, w->reader ? " (read by node '" : "", w->reader ? w->reader : "", w->reader ? "')" : "");
}

static bool defined_in(const otter_graph *g, const ot_strmap *producer, const char *name) {
    return ot_strmap_has(producer, name) || otter_graph_find_input(g, name) >= 0 ||
           otter_graph_find_initializer(g, name) >= 0;
}

/* The value for a new input or output: the declared type, or an initializer's, or none. */
static otter_status typed_value(otter_value *v, const otter_graph *g, const char *name) {
    memset(v, 0, sizeof *v);
    v->name = ot_strdup(name);
    if (!v->name) return OT_NOMEM();
    const otter_type *t = otter_graph_value_type(g, name);
    otter_status s = OTTER_OK;
    if (t) {
        s = otter_type_copy(&v->type, t);
        v->has_type = s == OTTER_OK && t->kind != OTTER_TYPE_NONE;
    } else {
        ptrdiff_t ii = otter_graph_find_initializer(g, name);
        if (ii >= 0) {
            const otter_tensor *init = g->initializers[ii];
            s = otter_type_set_tensor(&v->type, init->dtype, init->rank, init->dims, NULL);
            v->has_type = s == OTTER_OK;
        }
    }
    if (s != OTTER_OK) ot_value_clear(v);
    return s;
}

static void free_values(otter_value *vs, size_t n) {
    for (size_t i = 0; i < n; i++) ot_value_clear(&vs[i]);
    ot_free(vs);
}

static otter_status extract_graph(otter_graph *g, size_t n_inputs, const char *const *inputs, size_t n_outputs,
                                  const char *const *outputs) {
    walk w = {0};
    w.g = g;
    otter_status s = ot_strmap_reserve(&w.producer, g->n_nodes);
    if (s == OTTER_OK) s = ot_strmap_reserve(&w.given, n_inputs);
    if (s == OTTER_OK) s = ot_strmap_reserve(&w.seen, g->n_nodes);
    w.live = ot_calloc(g->n_nodes + 1, sizeof(bool));
    w.init_used = ot_calloc(g->n_initializers + 1, sizeof(bool));
    if (s == OTTER_OK && (!w.live || !w.init_used)) s = OT_NOMEM();
    for (size_t i = 0; i < g->n_nodes && s == OTTER_OK; i++)
        for (size_t j = 0; j < g->nodes[i]->n_outputs && s == OTTER_OK; j++) {
            const char *o = g->nodes[i]->outputs[j];
            if (!ot_str_empty(o) && !ot_strmap_has(&w.producer, o)) s = ot_strmap_put(&w.producer, o, i);
        }
    for (size_t i = 0; i < n_inputs && s == OTTER_OK; i++) {
        if (ot_str_empty(inputs[i]))
            s = ot_error(OTTER_ERR_ARGUMENT, "input %zu: empty tensor name", i + 1);
        else if (!defined_in(g, &w.producer, inputs[i]))
            s = ot_error(OTTER_ERR_NOT_FOUND, "input '%s' is not a tensor of graph '%s'", inputs[i],
                         g->name ? g->name : "");
        else if (ot_strmap_has(&w.given, inputs[i]))
            s = ot_error(OTTER_ERR_ARGUMENT, "input '%s' is listed twice", inputs[i]);
        else
            s = ot_strmap_put(&w.given, inputs[i], 0);
    }
    for (size_t i = 0; i < n_outputs && s == OTTER_OK; i++) {
        if (ot_str_empty(outputs[i]))
            s = ot_error(OTTER_ERR_ARGUMENT, "output %zu: empty tensor name", i + 1);
        else if (!defined_in(g, &w.producer, outputs[i]))
            s = ot_error(OTTER_ERR_NOT_FOUND, "output '%s' is not a tensor of graph '%s'", outputs[i],
                         g->name ? g->name : "");
        for (size_t k = 0; k < i && s == OTTER_OK; k++)
            if (ot_streq(outputs[k], outputs[i]))
                s = ot_error(OTTER_ERR_ARGUMENT, "output '%s' is listed twice", outputs[i]);
    }
    /* Walk back from each output to the given inputs and initializers. */
    for (size_t i = 0; i < n_outputs && s == OTTER_OK; i++) {
        w.root = outputs[i];
        w.reader = NULL;
        s = visit(outputs[i], &w);
        while (s == OTTER_OK && w.n_stack > 0) {
            size_t p = w.stack[--w.n_stack];
            w.reader = g->nodes[p]->name;
            s = ot_node_reads(g->nodes[p], visit, &w);
        }
    }
    /* A kept node must not also produce one of the given inputs (it would be defined twice). */
    for (size_t i = 0; i < g->n_nodes && s == OTTER_OK; i++) {
        if (!w.live[i]) continue;
        for (size_t j = 0; j < g->nodes[i]->n_outputs && s == OTTER_OK; j++)
            if (!ot_str_empty(g->nodes[i]->outputs[j]) && ot_strmap_has(&w.given, g->nodes[i]->outputs[j]))
                s = ot_error(OTTER_ERR_INVALID,
                             "input '%s' is also an output of node '%s' (%s), which the outputs need for another "
                             "of its outputs",
                             g->nodes[i]->outputs[j], g->nodes[i]->name ? g->nodes[i]->name : "", g->nodes[i]->op_type);
    }

    /* New inputs and outputs (typed from the old graph), then prune. */
    otter_value *ins = NULL, *outs = NULL;
    size_t n_ins = 0, n_outs = 0;
    if (s == OTTER_OK) {
        ins = ot_calloc(n_inputs + 1, sizeof *ins);
        outs = ot_calloc(n_outputs + 1, sizeof *outs);
        if (!ins || !outs) s = OT_NOMEM();
    }
    for (size_t i = 0; i < n_inputs && s == OTTER_OK; i++)
        if ((s = typed_value(&ins[i], g, inputs[i])) == OTTER_OK) n_ins++;
    for (size_t i = 0; i < n_outputs && s == OTTER_OK; i++)
        if ((s = typed_value(&outs[i], g, outputs[i])) == OTTER_OK) n_outs++;
    if (s == OTTER_OK) {
        size_t k = 0;
        for (size_t i = 0; i < g->n_nodes; i++) {
            if (w.live[i])
                g->nodes[k++] = g->nodes[i];
            else
                otter_node_free(g->nodes[i]);
        }
        g->n_nodes = k;
        k = 0;
        for (size_t i = 0; i < g->n_initializers; i++) {
            bool keep = w.init_used[i] && !ot_strmap_has(&w.given, g->initializers[i]->name);
            if (keep)
                g->initializers[k++] = g->initializers[i];
            else
                otter_tensor_free(g->initializers[i]);
        }
        g->n_initializers = k;
        /* value_info of intermediate tensors still produced. */
        ot_strmap kept = {0};
        s = ot_strmap_reserve(&kept, g->n_nodes * 2);
        for (size_t i = 0; i < g->n_nodes && s == OTTER_OK; i++)
            for (size_t j = 0; j < g->nodes[i]->n_outputs && s == OTTER_OK; j++)
                if (!ot_str_empty(g->nodes[i]->outputs[j])) s = ot_strmap_put(&kept, g->nodes[i]->outputs[j], 0);
        k = 0;
        for (size_t i = 0; i < g->n_value_info; i++) {
            const char *name = g->value_info[i].name;
            bool out = false;
            for (size_t o = 0; o < n_outputs; o++) out = out || ot_streq(outputs[o], name);
            if (s == OTTER_OK && name && ot_strmap_has(&kept, name) && !out)
                g->value_info[k++] = g->value_info[i];
            else
                ot_value_clear(&g->value_info[i]);
        }
        g->n_value_info = k;
        ot_strmap_free(&kept);
        free_values(g->inputs, g->n_inputs);
        free_values(g->outputs, g->n_outputs);
        g->inputs = ins;
        g->n_inputs = n_ins;
        g->cap_inputs = n_inputs + 1;
        g->outputs = outs;
        g->n_outputs = n_outs;
        g->cap_outputs = n_outputs + 1;
        ins = outs = NULL;
        n_ins = n_outs = 0;
    }
    free_values(ins, n_ins);
    free_values(outs, n_outs);
    ot_free(w.live);
    ot_free(w.init_used);
    ot_free(w.stack);
    ot_strmap_free(&w.producer);
    ot_strmap_free(&w.given);
    ot_strmap_free(&w.seen);
    return s;
}

otter_status otter_model_extract(otter_model **out, const otter_model *m, size_t n_inputs, const char *const *inputs,
                                 size_t n_outputs, const char *const *outputs) {
    if (!out || !m || !m->graph || (n_inputs && !inputs) || !outputs || n_outputs == 0)
        return ot_error(OTTER_ERR_ARGUMENT, "extract: the model, its graph or the output names are missing");
    *out = NULL;
    otter_model *c = NULL;
    OT_TRY(otter_model_clone(&c, m));
    otter_status s = extract_graph(c->graph, n_inputs, inputs, n_outputs, outputs);
    if (s != OTTER_OK) {
        otter_model_free(c);
        return ot_error_context(s, "extract: ");
    }
    *out = c;
    return OTTER_OK;
}
