/* Gradients through control flow: If, Loop and Scan.
 *
 * Loop and Scan: before the builder runs, each one that lies between a trainable tensor and the loss
 * is unrolled into copies of its body, one per iteration, when its trip count is known when gradients
 * are built (a constant M and a condition that stays true; a Scan input's static length); the ordinary
 * rules then differentiate the copies. A trip count known only when the model runs is an error naming
 * the node.
 *
 * If: the gradient is an If on the same condition whose branches are each branch's own gradient
 * graph, built by otter_model_add_gradients on the branch against the outer-scope tensors it reads
 * (zeros for one a branch doesn't read). A branch's "loss" is sum_j sum(Y_j * dY_j), whose gradient
 * is the vector-Jacobian product the If's outputs need; the branch is recomputed inside the gradient
 * If. So that the builder sees what an If depends on, the tensors its branches read from the outer
 * scope are extra inputs of the If node while gradients are built (ot_grad_expose_captures); they
 * are taken away before the model is returned (ot_grad_hide_captures). */
#include <string.h>

#include "autodiff/grad.h"
#include "core/core.h"
#include "core/strmap.h"
#include "ir/edit_internal.h"
#include "otter/autodiff.h"
#include "otter/edit.h"
#include "otter/infer.h"

static const char *label(const otter_node *n) { return !ot_str_empty(n->name) ? n->name : n->outputs[0]; }

static bool is_op(const otter_node *n, const char *op) {
    return (ot_str_empty(n->domain) || ot_streq(n->domain, "ai.onnx")) && ot_streq(n->op_type, op);
}

static const otter_graph *graph_attr(const otter_node *n, const char *name) {
    const otter_attr *a = otter_node_attr(n, name);
    return a && a->type == OTTER_ATTR_GRAPH ? a->g : NULL;
}

/* ---- names ----------------------------------------------------------------------------------- */

/* Distinct names in first-seen order (borrowed strings). */
typedef struct name_list {
    const char **v;
    size_t n, cap;
    ot_strmap seen;
} name_list;

static otter_status list_add(const char *name, void *user) {
    name_list *l = user;
    if (ot_strmap_has(&l->seen, name)) return OTTER_OK;
    OT_TRY(ot_strmap_put(&l->seen, name, 0));
    OT_TRY(ot_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v));
    l->v[l->n++] = name;
    return OTTER_OK;
}

static void list_free(name_list *l) {
    ot_free(l->v);
    ot_strmap_free(&l->seen);
}

/* The outer-scope tensors n's subgraphs read (not n's own inputs). */
static otter_status captures(const otter_node *n, name_list *out) {
    otter_node bodies_only = *n;
    bodies_only.n_inputs = 0;
    return ot_node_reads(&bodies_only, list_add, out);
}

/* Renaming a graph's tensors: old name -> new name, both owned here. */
typedef struct renamer {
    ot_strmap map;
    char **pool;
    size_t n_pool, cap_pool;
    const char *prefix; /* for node names and the tensors the graph defines */
} renamer;

static const char *pool_own(renamer *r, char *s) {
    if (!s || ot_grow((void **)&r->pool, &r->cap_pool, r->n_pool + 1, sizeof *r->pool) != OTTER_OK) {
        ot_free(s);
        return NULL;
    }
    r->pool[r->n_pool++] = s;
    return s;
}

static otter_status renamer_put(renamer *r, const char *old_name, const char *new_name) {
    const char *k = pool_own(r, ot_strdup(old_name)), *v = pool_own(r, ot_strdup(new_name));
    if (!k || !v) return OT_NOMEM();
    return ot_strmap_put(&r->map, k, (intptr_t)v);
}

static const char *renamed(const renamer *r, const char *name) {
    intptr_t v;
    return ot_strmap_get(&r->map, name, &v) ? (const char *)v : name;
}

/* Map every tensor g defines (initializers, node outputs) to prefix + name. */
static otter_status renamer_add_locals(renamer *r, const otter_graph *g) {
    for (size_t i = 0; i < g->n_initializers; i++) {
        const char *name = g->initializers[i]->name;
        const char *to = pool_own(r, ot_sprintf("%s%s", r->prefix, name));
        if (!to) return OT_NOMEM();
        OT_TRY(renamer_put(r, name, to));
    }
    for (size_t k = 0; k < g->n_nodes; k++)
        for (size_t j = 0; j < g->nodes[k]->n_outputs; j++) {
            const char *name = g->nodes[k]->outputs[j];
            if (ot_str_empty(name)) continue;
            const char *to = pool_own(r, ot_sprintf("%s%s", r->prefix, name));
            if (!to) return OT_NOMEM();
            OT_TRY(renamer_put(r, name, to));
        }
    return OTTER_OK;
}

static otter_status swap_name(char **s, const ot_strmap *map) {
    intptr_t v;
    if (ot_str_empty(*s) || !ot_strmap_get(map, *s, &v)) return OTTER_OK;
    char *c = ot_strdup((const char *)v);
    if (!c) return OT_NOMEM();
    ot_free(*s);
    *s = c;
    return OTTER_OK;
}

static otter_status rename_graph_attrs(otter_node *n, const ot_strmap *map);

/* Rename what a nested graph reads from outside itself; names it defines shadow the map. */
static otter_status rename_outer_reads(otter_graph *sub, const ot_strmap *map) {
    ot_strmap local = {0}, narrowed = {0};
    otter_status s = OTTER_OK;
    for (size_t i = 0; i < sub->n_inputs && !s; i++) s = ot_strmap_put(&local, sub->inputs[i].name, 0);
    for (size_t i = 0; i < sub->n_initializers && !s; i++) s = ot_strmap_put(&local, sub->initializers[i]->name, 0);
    for (size_t k = 0; k < sub->n_nodes && !s; k++)
        for (size_t j = 0; j < sub->nodes[k]->n_outputs && !s; j++)
            if (!ot_str_empty(sub->nodes[k]->outputs[j])) s = ot_strmap_put(&local, sub->nodes[k]->outputs[j], 0);
    for (size_t i = 0; i < map->cap && !s; i++)
        if (map->keys[i] && !ot_strmap_has(&local, map->keys[i]))
            s = ot_strmap_put(&narrowed, map->keys[i], map->values[i]);
    for (size_t k = 0; k < sub->n_nodes && !s; k++) {
        for (size_t j = 0; j < sub->nodes[k]->n_inputs && !s; j++) s = swap_name(&sub->nodes[k]->inputs[j], &narrowed);
        if (!s) s = rename_graph_attrs(sub->nodes[k], &narrowed);
    }
    for (size_t i = 0; i < sub->n_outputs && !s; i++) s = swap_name(&sub->outputs[i].name, &narrowed);
    ot_strmap_free(&local);
    ot_strmap_free(&narrowed);
    return s;
}

static otter_status rename_graph_attrs(otter_node *n, const ot_strmap *map) {
    for (size_t a = 0; a < n->n_attrs; a++) {
        otter_attr *at = &n->attrs[a];
        if (at->g) OT_TRY(rename_outer_reads(at->g, map));
        for (size_t k = 0; k < at->n_graphs; k++)
            if (at->graphs[k]) OT_TRY(rename_outer_reads(at->graphs[k], map));
    }
    return OTTER_OK;
}

/* Apply the renaming to g: its nodes (names prefixed), initializers, outputs and subgraphs' reads.
 * value_info is dropped (it would name the old tensors). */
static otter_status renamer_apply(const renamer *r, otter_graph *g) {
    for (size_t k = 0; k < g->n_nodes; k++) {
        otter_node *n = g->nodes[k];
        OT_TRY(ot_prefix_string(&n->name, r->prefix));
        for (size_t j = 0; j < n->n_inputs; j++) OT_TRY(swap_name(&n->inputs[j], &r->map));
        for (size_t j = 0; j < n->n_outputs; j++) OT_TRY(swap_name(&n->outputs[j], &r->map));
        OT_TRY(rename_graph_attrs(n, &r->map));
    }
    for (size_t i = 0; i < g->n_initializers; i++) OT_TRY(swap_name(&g->initializers[i]->name, &r->map));
    for (size_t i = 0; i < g->n_outputs; i++) OT_TRY(swap_name(&g->outputs[i].name, &r->map));
    for (size_t i = 0; i < g->n_value_info; i++) ot_value_clear(&g->value_info[i]);
    g->n_value_info = 0;
    return OTTER_OK;
}

static void renamer_free(renamer *r) {
    for (size_t i = 0; i < r->n_pool; i++) ot_free(r->pool[i]);
    ot_free(r->pool);
    ot_strmap_free(&r->map);
}

/* ---- which loops the gradient goes through ------------------------------------------------- */

static bool control_flow(const otter_node *n) { return is_op(n, "If") || is_op(n, "Loop") || is_op(n, "Scan"); }

static otter_status mark(const char *name, void *set) { return ot_strmap_put(set, name, 1); }

typedef struct any_of {
    const ot_strmap *set;
    bool found;
} any_of;

static otter_status find_in(const char *name, void *user) {
    any_of *a = user;
    a->found |= ot_strmap_has(a->set, name);
    return OTTER_OK;
}

/* Tensors that depend on a trainable one (as the builder propagates them: through the inputs a
 * gradient rule differentiates, every input of a node without one, everything control flow reads,
 * into outputs that may be float), and tensors the loss depends on. */
typedef struct flow {
    ot_strmap from_wrt, to_loss;
} flow;

/* Whether a tensor may be float (unknown types may: the builder decides the same way). */
static bool maybe_float(const otter_graph *typed, const char *name) {
    const otter_type *t = typed ? otter_graph_value_type(typed, name) : NULL;
    return !t || t->kind != OTTER_TYPE_TENSOR || !t->has_elem_type || otter_dtype_is_float(t->elem_type);
}

static otter_status flow_compute(flow *f, const otter_graph *g, const otter_graph *typed, const otter_grad_options *o) {
    for (size_t i = 0; i < o->n_wrt; i++) OT_TRY(ot_strmap_put(&f->from_wrt, o->wrt[i], 1));
    for (size_t k = 0; k < g->n_nodes; k++) {
        const otter_node *n = g->nodes[k];
        any_of dep = {&f->from_wrt, false};
        if (control_flow(n)) {
            OT_TRY(ot_node_reads(n, find_in, &dep));
        } else {
            const ot_op_entry *r = ot_op_grad_rule(n->domain, n->op_type);
            for (size_t i = 0; i < n->n_inputs; i++)
                if (!r || ot_op_diff_input(r, i)) OT_TRY(find_in(n->inputs[i], &dep));
        }
        for (size_t j = 0; dep.found && j < n->n_outputs; j++)
            if (!ot_str_empty(n->outputs[j]) && maybe_float(typed, n->outputs[j]))
                OT_TRY(ot_strmap_put(&f->from_wrt, n->outputs[j], 1));
    }
    OT_TRY(ot_strmap_put(&f->to_loss, o->loss, 1));
    for (size_t k = g->n_nodes; k-- > 0;) {
        otter_node *n = g->nodes[k];
        bool reaches = false;
        for (size_t j = 0; j < n->n_outputs; j++) reaches |= ot_strmap_has(&f->to_loss, n->outputs[j]);
        if (reaches) OT_TRY(ot_node_reads(n, mark, &f->to_loss));
    }
    return OTTER_OK;
}

static otter_status on_gradient_path(const flow *f, const otter_node *n, bool *on_path) {
    bool reaches = false;
    for (size_t j = 0; j < n->n_outputs; j++) reaches |= ot_strmap_has(&f->to_loss, n->outputs[j]);
    any_of dep = {&f->from_wrt, false};
    if (reaches) OT_TRY(ot_node_reads(n, find_in, &dep));
    *on_path = reaches && dep.found;
    return OTTER_OK;
}

/* ---- unrolling ------------------------------------------------------------------------------ */

typedef struct unroll {
    otter_graph *g; /* its node list is being rebuilt: nodes before the loop are in place */
    int64_t opset;
    const otter_graph *typed; /* g with inferred shapes (for Scan lengths); NULL when inference failed */
} unroll;

/* The value of a constant tensor of g (an initializer that isn't an input, or a Constant node). */
static const otter_tensor *constant(const otter_graph *g, const char *name) {
    if (ot_str_empty(name) || otter_graph_find_input(g, name) >= 0) return NULL;
    ptrdiff_t i = otter_graph_find_initializer(g, name);
    if (i >= 0) return g->initializers[i];
    ptrdiff_t p = otter_graph_find_producer(g, name);
    if (p < 0 || !is_op(g->nodes[p], "Constant")) return NULL;
    const otter_attr *a = otter_node_attr(g->nodes[p], "value");
    return a && a->type == OTTER_ATTR_TENSOR ? a->t : NULL;
}

/* A one-element int64 or bool constant's value. */
static bool constant_int(const otter_tensor *t, int64_t *v) {
    if (!t || otter_tensor_numel(t) != 1) return false;
    if (t->dtype == OTTER_DTYPE_INT64)
        *v = *(const int64_t *)t->data;
    else if (t->dtype == OTTER_DTYPE_BOOL)
        *v = *(const uint8_t *)t->data;
    else
        return false;
    return true;
}

static otter_status add_node(otter_graph *g, const char *op, const char *name, size_t n_in, const char *const *ins,
                             const char *out, otter_node **made) {
    otter_node *n;
    OT_TRY(otter_node_create(&n, op, name, n_in, ins, 1, &out));
    if (made) *made = n;
    return otter_graph_add_node(g, n);
}

static otter_status add_scalar(otter_graph *g, const char *name, otter_dtype dtype, int64_t v) {
    otter_tensor *t;
    OT_TRY(otter_tensor_create(&t, name, dtype, 0, NULL));
    if (dtype == OTTER_DTYPE_BOOL)
        *(uint8_t *)t->data = (uint8_t)v;
    else
        *(int64_t *)t->data = v;
    return otter_graph_add_initializer(g, t);
}

/* The names graph `body` reads (its nodes' inputs, what their subgraphs read, its outputs). */
static otter_status body_reads(const otter_graph *body, ot_strmap *reads) {
    for (size_t k = 0; k < body->n_nodes; k++) OT_TRY(ot_node_reads(body->nodes[k], mark, reads));
    for (size_t i = 0; i < body->n_outputs; i++) OT_TRY(mark(body->outputs[i].name, reads));
    return OTTER_OK;
}

/* Append one copy of `body` to u->g: body input i reads bound[i], every tensor the body defines is
 * renamed prefix + name. outs[i] receives the name (owned) of the body's output i in the copy. */
static otter_status inline_body(unroll *u, const otter_graph *body, const char *prefix, const char *const *bound,
                                char **outs) {
    otter_graph *c = NULL;
    renamer r = {.prefix = prefix};
    otter_status s = otter_graph_clone(&c, body);
    for (size_t i = 0; s == OTTER_OK && i < c->n_inputs; i++) s = renamer_put(&r, c->inputs[i].name, bound[i]);
    if (s == OTTER_OK) s = renamer_add_locals(&r, c);
    for (size_t i = 0; s == OTTER_OK && i < c->n_outputs; i++)
        if (!(outs[i] = ot_strdup(renamed(&r, c->outputs[i].name)))) s = OT_NOMEM();
    if (s == OTTER_OK) s = renamer_apply(&r, c);
    /* Move the copy's initializers and nodes over. */
    for (size_t i = 0; s == OTTER_OK && i < c->n_initializers; i++) {
        s = otter_graph_add_initializer(u->g, c->initializers[i]);
        c->initializers[i] = NULL;
    }
    for (size_t k = 0; s == OTTER_OK && k < c->n_nodes; k++) {
        s = otter_graph_add_node(u->g, c->nodes[k]);
        c->nodes[k] = NULL;
    }
    if (c) {
        for (size_t i = 0; i < c->n_initializers; i++) otter_tensor_free(c->initializers[i]);
        for (size_t k = 0; k < c->n_nodes; k++) otter_node_free(c->nodes[k]);
        c->n_initializers = c->n_nodes = 0;
        otter_graph_free(c);
    }
    renamer_free(&r);
    return s;
}

/* out = parts[0..count) stacked along a new axis `axis` (Unsqueeze each, then Concat). */
static otter_status stack(unroll *u, const char *prefix, char **parts, size_t count, int64_t axis, const char *out) {
    otter_status s = OTTER_OK;
    char *axes = ot_sprintf("%saxes", prefix);
    char **expanded = ot_calloc(count ? count : 1, sizeof *expanded);
    if (!axes || !expanded) s = OT_NOMEM();
    if (s == OTTER_OK && u->opset >= 13) {
        otter_tensor *t;
        int64_t one = 1;
        s = otter_tensor_from_data(&t, axes, OTTER_DTYPE_INT64, 1, &one, &axis);
        if (s == OTTER_OK) s = otter_graph_add_initializer(u->g, t);
    }
    for (size_t i = 0; s == OTTER_OK && i < count; i++) {
        otter_node *n;
        if (!(expanded[i] = ot_sprintf("%sexpanded_%zu", prefix, i))) {
            s = OT_NOMEM();
            break;
        }
        const char *ins[] = {parts[i], axes};
        s = add_node(u->g, "Unsqueeze", expanded[i], u->opset >= 13 ? 2 : 1, ins, expanded[i], &n);
        if (s == OTTER_OK && u->opset < 13) s = otter_node_set_attr_ints(n, "axes", 1, &axis);
    }
    otter_node *cat;
    if (s == OTTER_OK) s = add_node(u->g, "Concat", out, count, (const char *const *)expanded, out, &cat);
    if (s == OTTER_OK) s = otter_node_set_attr_int(cat, "axis", axis);
    for (size_t i = 0; expanded && i < count; i++) ot_free(expanded[i]);
    ot_free(expanded);
    ot_free(axes);
    return s;
}

/* Whether the Loop body's condition output is always true or the condition it got: then the loop
 * runs M times (or never, when its condition input is false). The constant may be the enclosing
 * graph's (PyTorch passes an outer true through an Identity). */
static bool runs_trip_count(const otter_graph *outer, const otter_graph *body) {
    const char *name = body->outputs[0].name;
    for (;;) {
        if (ot_streq(name, body->inputs[1].name)) return true;
        int64_t v;
        if (constant_int(constant(body, name), &v)) return v != 0;
        ptrdiff_t p = otter_graph_find_producer(body, name);
        if (p >= 0 && is_op(body->nodes[p], "Identity")) {
            name = body->nodes[p]->inputs[0];
            continue;
        }
        bool local = p >= 0 || otter_graph_find_input(body, name) >= 0;
        return !local && constant_int(constant(outer, name), &v) && v != 0;
    }
}

static void free_names(char **v, size_t n) {
    for (size_t i = 0; v && i < n; i++) ot_free(v[i]);
    ot_free(v);
}

/* After unrolled iteration t: its outputs (states first, then scan outputs; the caller's array, whose
 * names move here) become the next iteration's states and iteration t's scan values. */
static void carry_iteration(char **outs, char **states, size_t n_states, char ***scans, size_t n_scans, size_t t) {
    for (size_t i = 0; i < n_states; i++) {
        ot_free(states[i]);
        states[i] = outs[i];
    }
    for (size_t q = 0; q < n_scans; q++) scans[q][t] = outs[n_states + q];
}

/* Finish an unrolled loop: states[i] -> the node's output i (Identity); the per-iteration values of
 * scan output q, in output order, stacked into output n_states + q. */
static otter_status finish_loop(unroll *u, const otter_node *n, const char *prefix, char **states, size_t n_states,
                                char ***scans, size_t n_scans, size_t trips, const int64_t *axes,
                                const int64_t *reverse) {
    otter_status s = OTTER_OK;
    for (size_t i = 0; s == OTTER_OK && i < n_states; i++) {
        if (ot_str_empty(n->outputs[i])) continue;
        char *name = ot_sprintf("%sfinal_%zu", prefix, i);
        s = name ? add_node(u->g, "Identity", name, 1, (const char *const *)&states[i], n->outputs[i], NULL)
                 : OT_NOMEM();
        ot_free(name);
    }
    char **ordered = ot_calloc(trips ? trips : 1, sizeof *ordered);
    if (!ordered) return OT_NOMEM();
    for (size_t q = 0; s == OTTER_OK && q < n_scans; q++) {
        if (ot_str_empty(n->outputs[n_states + q])) continue;
        for (size_t p = 0; p < trips; p++) ordered[p] = scans[q][reverse && reverse[q] ? trips - 1 - p : p];
        char *pre = ot_sprintf("%sscan_output_%zu/", prefix, q);
        s = pre ? stack(u, pre, ordered, trips, axes ? axes[q] : 0, n->outputs[n_states + q]) : OT_NOMEM();
        ot_free(pre);
    }
    ot_free(ordered);
    return s;
}

static otter_status unroll_loop(unroll *u, const otter_node *n) {
    const otter_graph *body = graph_attr(n, "body");
    size_t nc = n->n_inputs >= 2 ? n->n_inputs - 2 : 0;
    if (!body || body->n_inputs != nc + 2 || body->n_outputs < nc + 1 || n->n_outputs != body->n_outputs - 1)
        return ot_error(OTTER_ERR_INVALID, "node '%s' (Loop): its body doesn't match its inputs and outputs", label(n));
    size_t n_scans = body->n_outputs - 1 - nc;
    int64_t trips, go = 1;
    if (!constant_int(constant(u->g, n->n_inputs > 0 ? n->inputs[0] : ""), &trips))
        return ot_error(OTTER_ERR_UNSUPPORTED,
                        "node '%s' (Loop): its trip count M is not a constant, so it can't be unrolled to build "
                        "gradients (otter differentiates a Loop whose trip count is known when gradients are built)",
                        label(n));
    if (n->n_inputs > 1 && !ot_str_empty(n->inputs[1]) && !constant_int(constant(u->g, n->inputs[1]), &go))
        return ot_error(OTTER_ERR_UNSUPPORTED,
                        "node '%s' (Loop): its condition input is not a constant, so its trip count is only known "
                        "when it runs and it can't be unrolled to build gradients",
                        label(n));
    if (!runs_trip_count(u->g, body))
        return ot_error(OTTER_ERR_UNSUPPORTED,
                        "node '%s' (Loop): its body computes whether to go on, so its trip count is only known when "
                        "it runs and it can't be unrolled to build gradients",
                        label(n));
    if (!go || trips < 0) trips = 0;
    if (trips == 0 && n_scans)
        return ot_error(OTTER_ERR_UNSUPPORTED, "node '%s' (Loop): no iterations, so its scan outputs have no shape",
                        label(n));
    otter_status s = OTTER_OK;
    char **states = ot_calloc(nc + 1, sizeof *states), ***scans = ot_calloc(n_scans + 1, sizeof *scans);
    char **outs = ot_calloc(body->n_outputs, sizeof *outs);
    const char **bound = ot_calloc(body->n_inputs, sizeof *bound);
    char *iter_name = NULL, *cond_name = NULL, *prefix = NULL;
    if (!states || !scans || !outs || !bound) s = OT_NOMEM();
    for (size_t i = 0; s == OTTER_OK && i < nc; i++)
        if (!(states[i] = ot_strdup(n->inputs[2 + i]))) s = OT_NOMEM();
    for (size_t q = 0; s == OTTER_OK && q < n_scans; q++)
        if (!(scans[q] = ot_calloc((size_t)trips, sizeof **scans))) s = OT_NOMEM();
    ot_strmap reads = {0};
    if (s == OTTER_OK) s = body_reads(body, &reads);
    bool reads_iter = ot_strmap_has(&reads, body->inputs[0].name),
         reads_cond = ot_strmap_has(&reads, body->inputs[1].name);
    ot_strmap_free(&reads);
    for (int64_t t = 0; s == OTTER_OK && t < trips; t++) {
        ot_free(prefix);
        if (!(prefix = ot_sprintf("%s/iteration_%lld/", label(n), (long long)t))) {
            s = OT_NOMEM();
            break;
        }
        ot_free(iter_name);
        iter_name = ot_sprintf("%siteration_number", prefix);
        if (!iter_name) s = OT_NOMEM();
        if (s == OTTER_OK && reads_iter) s = add_scalar(u->g, iter_name, OTTER_DTYPE_INT64, t);
        bound[0] = iter_name;
        if (n->n_inputs > 1 && !ot_str_empty(n->inputs[1])) {
            bound[1] = n->inputs[1];
        } else {
            ot_free(cond_name);
            cond_name = ot_sprintf("%scondition", prefix);
            if (!cond_name) s = OT_NOMEM();
            if (s == OTTER_OK && reads_cond) s = add_scalar(u->g, cond_name, OTTER_DTYPE_BOOL, 1);
            bound[1] = cond_name;
        }
        for (size_t i = 0; i < nc; i++) bound[2 + i] = states[i];
        if (s == OTTER_OK) s = inline_body(u, body, prefix, bound, outs);
        if (s != OTTER_OK) break;
        ot_free(outs[0]);
        carry_iteration(outs + 1, states, nc, scans, n_scans, (size_t)t);
        memset(outs, 0, body->n_outputs * sizeof *outs);
    }
    ot_free(prefix);
    prefix = ot_sprintf("%s/", label(n));
    if (s == OTTER_OK)
        s = prefix ? finish_loop(u, n, prefix, states, nc, scans, n_scans, (size_t)trips, NULL, NULL) : OT_NOMEM();
    free_names(states, nc);
    for (size_t q = 0; scans && q < n_scans; q++) free_names(scans[q], (size_t)trips);
    ot_free(scans);
    free_names(outs, body->n_outputs);
    ot_free(bound);
    ot_free(iter_name);
    ot_free(cond_name);
    ot_free(prefix);
    return s;
}

/* Attribute `name` (count values, default 0) of a Scan node. */
static otter_status scan_ints(const otter_node *n, const char *name, size_t count, int64_t *v) {
    const otter_attr *a = otter_node_attr(n, name);
    for (size_t i = 0; i < count; i++) v[i] = a && i < a->n_ints ? a->ints[i] : 0;
    if (a && a->n_ints != count)
        return ot_error(OTTER_ERR_INVALID, "node '%s' (Scan): attribute '%s' has %zu values, expected %zu", label(n),
                        name, a->n_ints, count);
    return OTTER_OK;
}

static otter_status unroll_scan(unroll *u, const otter_node *n) {
    const otter_graph *body = graph_attr(n, "body");
    int64_t m = otter_node_attr_int(n, "num_scan_inputs", 0);
    if (u->opset < 9)
        return ot_error(OTTER_ERR_UNSUPPORTED, "node '%s' (Scan): Scan before opset 9 is not unrolled for gradients",
                        label(n));
    if (!body || m < 1 || (size_t)m > n->n_inputs || body->n_inputs != n->n_inputs || body->n_outputs != n->n_outputs ||
        n->n_outputs < n->n_inputs - (size_t)m)
        return ot_error(OTTER_ERR_INVALID, "node '%s' (Scan): its body doesn't match its inputs and outputs", label(n));
    size_t ns = n->n_inputs - (size_t)m, nq = n->n_outputs - ns;
    int64_t *attrs = ot_calloc(2 * (size_t)m + 2 * nq + 1, sizeof *attrs);
    if (!attrs) return OT_NOMEM();
    int64_t *in_axes = attrs, *in_dirs = attrs + m, *out_axes = attrs + 2 * m, *out_dirs = out_axes + nq;
    otter_status s = scan_ints(n, "scan_input_axes", (size_t)m, in_axes);
    if (s == OTTER_OK) s = scan_ints(n, "scan_input_directions", (size_t)m, in_dirs);
    if (s == OTTER_OK) s = scan_ints(n, "scan_output_axes", nq, out_axes);
    if (s == OTTER_OK) s = scan_ints(n, "scan_output_directions", nq, out_dirs);
    /* The sequence length: the scanned axis of the first scan input, known statically. */
    int64_t len = -1;
    const otter_type *t0 = s == OTTER_OK && u->typed ? otter_graph_value_type(u->typed, n->inputs[ns]) : NULL;
    ptrdiff_t init = t0 || !u->typed ? -1 : otter_graph_find_initializer(u->typed, n->inputs[ns]);
    int rank0 = t0 && t0->kind == OTTER_TYPE_TENSOR ? t0->rank : init >= 0 ? u->typed->initializers[init]->rank : -1;
    int64_t axis0 = in_axes[0] < 0 ? in_axes[0] + rank0 : in_axes[0];
    if (rank0 > 0 && axis0 >= 0 && axis0 < rank0)
        len = t0 ? t0->dims[axis0].value : u->typed->initializers[init]->dims[axis0];
    if (s == OTTER_OK && len < 1)
        s = ot_error(OTTER_ERR_UNSUPPORTED,
                     "node '%s' (Scan): the length of scan input '%s' is not known when gradients are built, so it "
                     "can't be unrolled",
                     label(n), n->inputs[ns]);
    char **states = ot_calloc(ns + 1, sizeof *states), ***scans = ot_calloc(nq + 1, sizeof *scans);
    char **outs = ot_calloc(body->n_outputs + 1, sizeof *outs), **slices = ot_calloc((size_t)m, sizeof *slices);
    const char **bound = ot_calloc(body->n_inputs, sizeof *bound);
    char *prefix = NULL;
    if (s == OTTER_OK && (!states || !scans || !outs || !slices || !bound)) s = OT_NOMEM();
    for (size_t i = 0; s == OTTER_OK && i < ns; i++)
        if (!(states[i] = ot_strdup(n->inputs[i]))) s = OT_NOMEM();
    for (size_t q = 0; s == OTTER_OK && q < nq; q++)
        if (!(scans[q] = ot_calloc((size_t)len, sizeof **scans))) s = OT_NOMEM();
    for (int64_t t = 0; s == OTTER_OK && t < len; t++) {
        ot_free(prefix);
        if (!(prefix = ot_sprintf("%s/iteration_%lld/", label(n), (long long)t))) {
            s = OT_NOMEM();
            break;
        }
        for (size_t i = 0; i < ns; i++) bound[i] = states[i];
        for (size_t j = 0; s == OTTER_OK && j < (size_t)m; j++) {
            /* This iteration's slice of scan input j: Gather at its position along the scanned axis. */
            ot_free(slices[j]);
            char *index = ot_sprintf("%sposition_%zu", prefix, j);
            slices[j] = ot_sprintf("%sscan_input_%zu", prefix, j);
            otter_node *g;
            const char *ins[] = {n->inputs[ns + j], index};
            if (!index || !slices[j]) s = OT_NOMEM();
            if (s == OTTER_OK) s = add_scalar(u->g, index, OTTER_DTYPE_INT64, in_dirs[j] ? len - 1 - t : t);
            if (s == OTTER_OK) s = add_node(u->g, "Gather", slices[j], 2, ins, slices[j], &g);
            if (s == OTTER_OK) s = otter_node_set_attr_int(g, "axis", in_axes[j]);
            ot_free(index);
            bound[ns + j] = slices[j];
        }
        if (s == OTTER_OK) s = inline_body(u, body, prefix, bound, outs);
        if (s != OTTER_OK) break;
        carry_iteration(outs, states, ns, scans, nq, (size_t)t);
        memset(outs, 0, body->n_outputs * sizeof *outs);
    }
    ot_free(prefix);
    prefix = ot_sprintf("%s/", label(n));
    if (s == OTTER_OK)
        s = prefix ? finish_loop(u, n, prefix, states, ns, scans, nq, (size_t)len, out_axes, out_dirs) : OT_NOMEM();
    free_names(states, ns);
    for (size_t q = 0; scans && q < nq; q++) free_names(scans[q], (size_t)(len > 0 ? len : 0));
    ot_free(scans);
    free_names(outs, body->n_outputs);
    free_names(slices, (size_t)m);
    ot_free(bound);
    ot_free(prefix);
    ot_free(attrs);
    return s;
}

/* One pass: unroll the Loop and Scan nodes on the gradient path; *done when there were none. */
static otter_status unroll_pass(otter_model *m, const otter_grad_options *o, bool *done) {
    otter_graph *g = m->graph;
    bool loops = false;
    for (size_t k = 0; k < g->n_nodes; k++) loops |= is_op(g->nodes[k], "Loop") || is_op(g->nodes[k], "Scan");
    *done = !loops;
    if (!loops) return OTTER_OK;
    /* Types: which tensors are float (for the path), Scan lengths. A model inference can't type
     * leaves them unknown. */
    otter_model *typed = NULL;
    otter_status s = otter_model_clone(&typed, m);
    if (s == OTTER_OK) {
        otter_status inferred = otter_model_infer_shapes(typed, NULL);
        if (inferred == OTTER_ERR_NOMEM) s = inferred;
        if (inferred != OTTER_OK) {
            otter_model_free(typed);
            typed = NULL;
        }
    }
    flow f = {0};
    if (s == OTTER_OK) s = flow_compute(&f, g, typed ? typed->graph : NULL, o);
    bool any = false;
    bool *todo = ot_calloc(g->n_nodes + 1, sizeof *todo);
    if (!todo) s = OT_NOMEM();
    for (size_t k = 0; s == OTTER_OK && k < g->n_nodes; k++) {
        const otter_node *n = g->nodes[k];
        if (is_op(n, "Loop") || is_op(n, "Scan")) s = on_gradient_path(&f, n, &todo[k]);
        any |= todo[k];
    }
    *done = !any;
    if (s == OTTER_OK && any) {
        /* Rebuild the node list, each loop replaced by its unrolled copies where it stood. */
        otter_node **old = g->nodes;
        size_t n_old = g->n_nodes;
        g->nodes = NULL;
        g->n_nodes = g->cap_nodes = 0;
        unroll u = {g, otter_model_opset(m, ""), typed ? typed->graph : NULL};
        for (size_t k = 0; k < n_old; k++) {
            if (s != OTTER_OK || todo[k]) {
                if (s == OTTER_OK) s = is_op(old[k], "Loop") ? unroll_loop(&u, old[k]) : unroll_scan(&u, old[k]);
                otter_node_free(old[k]);
            } else {
                s = otter_graph_add_node(g, old[k]);
            }
        }
        ot_free(old);
    }
    ot_free(todo);
    otter_model_free(typed);
    ot_strmap_free(&f.from_wrt);
    ot_strmap_free(&f.to_loss);
    return s;
}

otter_status ot_grad_unroll_loops(otter_model *m, const otter_grad_options *o) {
    bool done = false;
    /* Each pass unrolls the outermost loops; loops nested in their bodies come out in the next. */
    while (!done) OT_TRY(unroll_pass(m, o, &done));
    return OTTER_OK;
}

/* ---- If ---------------------------------------------------------------------------------- */

otter_status ot_grad_expose_captures(otter_graph *g) {
    for (size_t k = 0; k < g->n_nodes; k++) {
        otter_node *n = g->nodes[k];
        if (!is_op(n, "If") || n->n_inputs != 1) continue;
        name_list caps = {0};
        otter_status s = captures(n, &caps);
        for (size_t i = 0; s == OTTER_OK && i < caps.n; i++)
            if (!ot_streq(caps.v[i], n->inputs[0])) s = otter_node_add_input(n, caps.v[i]);
        list_free(&caps);
        OT_TRY(s);
    }
    return OTTER_OK;
}

void ot_grad_hide_captures(otter_graph *g) {
    for (size_t k = 0; k < g->n_nodes; k++) {
        otter_node *n = g->nodes[k];
        if (!is_op(n, "If")) continue;
        while (n->n_inputs > 1) ot_free(n->inputs[--n->n_inputs]);
    }
}

static otter_status push_value(otter_value **arr, size_t *count, size_t *cap, const char *name,
                               const otter_type *type) {
    otter_value v = {0};
    if (!(v.name = ot_strdup(name))) return OT_NOMEM();
    otter_status s = OTTER_OK;
    if (type) {
        v.has_type = true;
        s = otter_type_copy(&v.type, type);
    }
    if (s == OTTER_OK) s = ot_values_push(arr, count, cap, v);
    if (s != OTTER_OK) ot_value_clear(&v);
    return s;
}

/* The model differentiating one branch: the branch's nodes, the outer tensors it may read and the
 * If's output gradients as inputs, and loss = sum_j sum(Y_j * dY_j). */
static otter_status branch_model(ot_grad *g, const otter_node *n, const otter_graph *branch, otter_model **out,
                                 const char **loss) {
    otter_model *sub;
    OT_TRY(otter_model_create(&sub, "branch", ot_grad_opset(g)));
    otter_graph *copy;
    otter_status s = otter_graph_clone(&copy, branch);
    if (s == OTTER_OK) {
        otter_graph_free(sub->graph);
        sub->graph = copy;
    }
    for (size_t k = 0; s == OTTER_OK && k < copy->n_nodes; k++)
        if (!ot_str_empty(copy->nodes[k]->domain) && otter_model_opset(sub, copy->nodes[k]->domain) == 0)
            s = otter_model_set_opset(sub, copy->nodes[k]->domain, 1);
    otter_graph *sg = sub->graph;
    for (size_t i = 1; s == OTTER_OK && i < n->n_inputs; i++)
        s = push_value(&sg->inputs, &sg->n_inputs, &sg->cap_inputs, n->inputs[i], ot_grad_type(g, n->inputs[i]));
    /* dY_j is declared with Y_j's type as inferred in the branch (the If's may be less precise when the
     * branches differ), so the product's gradient knows it wasn't broadcast. */
    otter_model *typed = NULL;
    if (s == OTTER_OK) s = otter_model_clone(&typed, sub);
    if (s == OTTER_OK) {
        otter_status inferred = otter_model_infer_shapes(typed, NULL);
        if (inferred == OTTER_ERR_NOMEM) s = inferred;
        if (inferred != OTTER_OK) { /* otherwise the If's output types serve */
            otter_model_free(typed);
            typed = NULL;
        }
    }
    const char **parts = ot_calloc(n->n_outputs + 1, sizeof *parts);
    size_t n_parts = 0;
    if (!parts) s = OT_NOMEM();
    for (size_t j = 0; s == OTTER_OK && j < n->n_outputs && j < branch->n_outputs; j++) {
        const char *dy = ot_grad_dy(g, j);
        if (!dy) continue;
        const otter_value *y = &branch->outputs[j];
        const otter_type *ty = typed ? otter_graph_value_type(typed->graph, y->name) : NULL;
        if (!ty) ty = ot_grad_type(g, n->outputs[j]);
        s = push_value(&sg->inputs, &sg->n_inputs, &sg->cap_inputs, dy, ty ? ty : y->has_type ? &y->type : NULL);
        const char *prod = ot_grad_tmp(g, "Y_dY"), *sum = ot_grad_tmp(g, "sum_Y_dY");
        otter_node *r;
        if (s == OTTER_OK && (!prod || !sum)) s = OT_NOMEM();
        if (s == OTTER_OK) s = add_node(sg, "Mul", prod, 2, (const char *[]){y->name, dy}, prod, NULL);
        if (s == OTTER_OK) s = add_node(sg, "ReduceSum", sum, 1, &prod, sum, &r);
        if (s == OTTER_OK) s = otter_node_set_attr_int(r, "keepdims", 0);
        parts[n_parts++] = sum;
    }
    *loss = ot_grad_tmp(g, "branch_loss");
    if (s == OTTER_OK && !*loss) s = OT_NOMEM();
    if (s == OTTER_OK) s = add_node(sg, "Sum", *loss, n_parts, parts, *loss, NULL);
    ot_free(parts);
    otter_model_free(typed);
    if (s != OTTER_OK) {
        otter_model_free(sub);
        return s;
    }
    *out = sub;
    return OTTER_OK;
}

/* The gradient graph of one branch: outputs d(wrt[i]), reading the outer tensors and the If's output
 * gradients by name; everything it defines renamed under a fresh prefix. NULL on failure. */
static otter_graph *branch_gradient(ot_grad *g, const otter_node *n, const char *which, const char *const *wrt,
                                    size_t n_wrt) {
    const otter_graph *branch = graph_attr(n, which);
    if (!branch) {
        ot_grad_fail(g, OTTER_ERR_INVALID, "node '%s' (If) has no graph attribute '%s'", label(n), which);
        return NULL;
    }
    otter_model *sub = NULL;
    const char *loss = NULL;
    otter_status s = branch_model(g, n, branch, &sub, &loss);
    if (s == OTTER_OK) {
        otter_grad_options o = {.loss = loss, .n_wrt = n_wrt, .wrt = wrt};
        if ((s = otter_model_add_gradients(sub, &o)) != OTTER_OK) {
            ot_grad_fail(g, s, "node '%s' (If), %s: %s", label(n), which, otter_last_error());
            otter_model_free(sub);
            return NULL;
        }
    }
    otter_graph *sg = sub ? sub->graph : NULL;
    /* Outputs: the gradients; the outer tensors become outer-scope reads again. */
    for (size_t i = 0; sg && i < sg->n_outputs; i++) ot_value_clear(&sg->outputs[i]);
    for (size_t i = 0; sg && i < sg->n_inputs; i++) ot_value_clear(&sg->inputs[i]);
    if (sg) sg->n_outputs = sg->n_inputs = 0;
    for (size_t i = 0; s == OTTER_OK && i < n_wrt; i++) {
        char *name = ot_sprintf("%s_grad", wrt[i]);
        s = name ? push_value(&sg->outputs, &sg->n_outputs, &sg->cap_outputs, name, ot_grad_type(g, wrt[i]))
                 : OT_NOMEM();
        ot_free(name);
    }
    if (s == OTTER_OK) s = otter_graph_clean(sg, NULL);
    renamer r = {.prefix = NULL};
    char *prefix = NULL;
    const char *base = s == OTTER_OK ? ot_grad_tmp(g, which) : NULL;
    if (s == OTTER_OK && !(base && (prefix = ot_sprintf("%s/", base)))) s = OT_NOMEM();
    r.prefix = prefix;
    if (s == OTTER_OK) s = renamer_add_locals(&r, sg);
    if (s == OTTER_OK) s = renamer_apply(&r, sg);
    renamer_free(&r);
    ot_free(prefix);
    otter_graph *result = NULL;
    if (s == OTTER_OK && otter_graph_create(&result, which) == OTTER_OK) {
        sub->graph = result; /* swap: the model frees the empty one */
        result = sg;
    } else if (!ot_grad_failed(g)) {
        ot_grad_fail(g, s == OTTER_OK ? OTTER_ERR_NOMEM : s, "node '%s' (If), %s: %s", label(n), which,
                     otter_last_error());
    }
    otter_model_free(sub);
    return result;
}

/* If: d(captured outer tensors) = If(cond, then: then_branch's gradient, else: else_branch's). */
void ot_grad_if(ot_grad *g, otter_node *n) {
    const char **wrt = ot_calloc(n->n_inputs, sizeof *wrt), **dx = ot_calloc(n->n_inputs, sizeof *dx);
    size_t n_wrt = 0;
    if (!wrt || !dx) {
        ot_free(wrt);
        ot_free(dx);
        OT_GRAD_NOMEM(g);
    }
    for (size_t i = 1; i < n->n_inputs; i++)
        if (ot_grad_needs(g, i)) wrt[n_wrt++] = n->inputs[i];
    otter_graph *then_g = branch_gradient(g, n, "then_branch", wrt, n_wrt);
    otter_graph *else_g = then_g ? branch_gradient(g, n, "else_branch", wrt, n_wrt) : NULL;
    for (size_t i = 1, k = 0; i < n->n_inputs; i++)
        if (ot_grad_needs(g, i)) dx[k++] = ot_grad_dx(g, i);
    otter_node *r = then_g && else_g ? ot_grad_emit(g, "If", "", 1, (const char *const *)n->inputs, n_wrt, dx) : NULL;
    if (r) {
        otter_status s = otter_node_set_attr_graph(r, "then_branch", then_g); /* takes it, also on failure */
        then_g = NULL;
        if (s == OTTER_OK) {
            s = otter_node_set_attr_graph(r, "else_branch", else_g);
            else_g = NULL;
        }
        if (s != OTTER_OK) ot_grad_fail(g, s, "out of memory building gradients");
    }
    otter_graph_free(then_g);
    otter_graph_free(else_g);
    ot_free(wrt);
    ot_free(dx);
}
