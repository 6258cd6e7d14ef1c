/* The session: binds a model's graph to kernels once, then runs it many times (session_run.c); kernels
 * reach their inputs, outputs and scratch memory through session_kernel.c, and plan.c lays out the arena.
 *
 * Create (this file): one slot per tensor name (graph inputs, initializers, node outputs; names a subgraph
 * reads from an enclosing graph are OUTER slots pointing at the parent session's slot), each
 * node's kernel from the operator table at the model's opset for its domain, optimizations
 * (Identity / inference Dropout become aliases, nodes over constants run once and their outputs
 * become CONST slots), liveness (the last node reading each value, subgraph reads included) and a
 * sub-session per graph attribute.
 * Values: a slot holds a tensor (cur), a sequence (seq, owned by the slot when a kernel made it,
 * borrowed when it is the caller's or an enclosing graph's) or NONE (an optional without a value).
 * Sequences live on the heap, outside the plan; only kernels flagged OT_OP_VALUES see them. */
#include <string.h>
#include <unistd.h>

#include "check/schema.h"
#include "core/core.h"
#include "otter/io.h"
#include "runtime/fuse.h"
#include "runtime/ops/gemm.h"
#include "runtime/session.h"

/* ---- names ----------------------------------------------------------------------------------- */

/* Names g reads but does not define (recursively through nested subgraphs), in first-use order. */
static otter_status free_vars(const otter_graph *g, ot_strmap *out, const char ***list, size_t *n, size_t *cap) {
    ot_strmap def = {0};
    otter_status st = OTTER_OK;
    for (size_t i = 0; i < g->n_inputs && !st; i++) st = ot_strmap_put(&def, g->inputs[i].name, 0);
    for (size_t i = 0; i < g->n_initializers && !st; i++)
        if (g->initializers[i]->name) st = ot_strmap_put(&def, g->initializers[i]->name, 0);
    for (size_t k = 0; k < g->n_nodes && !st; k++)
        for (size_t o = 0; o < g->nodes[k]->n_outputs && !st; o++)
            if (g->nodes[k]->outputs[o][0]) st = ot_strmap_put(&def, g->nodes[k]->outputs[o], 0);
    for (size_t k = 0; k < g->n_nodes && !st; k++) {
        const otter_node *nd = g->nodes[k];
        const char **names = NULL;
        size_t nn = 0, nc = 0;
        for (size_t i = 0; i < nd->n_inputs && !st; i++) {
            const char *name = nd->inputs[i];
            if (!name[0] || ot_strmap_get(&def, name, NULL) || ot_strmap_get(out, name, NULL)) continue;
            if (!(st = ot_strmap_put(out, name, 0)) && !(st = ot_grow((void **)list, cap, *n + 1, sizeof **list)))
                (*list)[(*n)++] = name;
        }
        for (size_t a = 0; a < nd->n_attrs && !st; a++) {
            const otter_attr *at = &nd->attrs[a];
            size_t ng = at->type == OTTER_ATTR_GRAPH    ? (at->g ? 1 : 0)
                        : at->type == OTTER_ATTR_GRAPHS ? at->n_graphs
                                                        : 0;
            for (size_t gi = 0; gi < ng && !st; gi++) {
                const otter_graph *sub = at->type == OTTER_ATTR_GRAPH ? at->g : at->graphs[gi];
                ot_strmap inner = {0};
                st = free_vars(sub, &inner, &names, &nn, &nc);
                ot_strmap_free(&inner);
            }
        }
        for (size_t i = 0; i < nn && !st; i++) {
            if (ot_strmap_get(&def, names[i], NULL) || ot_strmap_get(out, names[i], NULL)) continue;
            if (!(st = ot_strmap_put(out, names[i], 0)) && !(st = ot_grow((void **)list, cap, *n + 1, sizeof **list)))
                (*list)[(*n)++] = names[i];
        }
        ot_free(names);
    }
    ot_strmap_free(&def);
    return st;
}

static otter_status add_slot(otter_session *s, const char *name, ot_slot_kind kind, size_t *out) {
    OT_TRY(ot_grow((void **)&s->slots, &s->cap_slots, s->n_slots + 1, sizeof *s->slots));
    ot_slot *sl = &s->slots[s->n_slots];
    memset(sl, 0, sizeof *sl);
    sl->name = name;
    sl->kind = kind;
    sl->producer = OT_NO_INDEX;
    sl->last_use = OT_NO_INDEX;
    *out = s->n_slots++;
    if (name[0]) OT_TRY(ot_strmap_put(&s->names, name, (intptr_t)*out));
    return OTTER_OK;
}

/* Find a name here or in an enclosing graph (then an OUTER slot is made for it). */
static otter_status resolve(otter_session *s, const char *name, size_t *out) {
    size_t i = ot_slot_find(s, name);
    if (i != OT_NO_INDEX) {
        *out = i;
        return OTTER_OK;
    }
    size_t pi;
    if (!s->parent || resolve(s->parent, name, &pi) != OTTER_OK)
        return ot_error(OTTER_ERR_INVALID, "'%s' is not defined", name);
    OT_TRY(add_slot(s, name, OT_SLOT_OUTER, &i));
    s->slots[i].outer_session = s->parent;
    s->slots[i].outer_slot = pi;
    *out = i;
    return OTTER_OK;
}

/* An alias: an extra slot entry would break "one slot per name", so an alias is a slot of kind
 * OUTER pointing into this same session. */
static otter_status add_alias(otter_session *s, const char *name, size_t target) {
    size_t i;
    OT_TRY(add_slot(s, name, OT_SLOT_OUTER, &i));
    s->slots[i].outer_session = s;
    s->slots[i].outer_slot = target;
    return OTTER_OK;
}

/* ---- create ---------------------------------------------------------------------------------- */

static int64_t model_opset(const otter_model *m, const char *domain) {
    for (size_t i = 0; i < m->n_opsets; i++) {
        const char *d = m->opsets[i].domain;
        bool same = ot_is_default_domain(d) ? ot_is_default_domain(domain)
                                            : (!ot_is_default_domain(domain) && strcmp(d, domain) == 0);
        if (same) return m->opsets[i].version;
    }
    return 0;
}

bool ot_slot_is_const(const otter_session *s, size_t i) {
    /* an Identity's alias is as constant as what it names (shared weights of copied layers) */
    const ot_slot *sl = &s->slots[ot_slot_local_target(s, i)];
    if (sl->kind == OT_SLOT_CONST) return true;
    return sl->kind == OT_SLOT_INIT && !sl->decl && !s->opts.no_fold_initializers;
}

/* Dropout that is the identity: no mask output used, not in training mode. */
static bool inference_dropout(const otter_session *s, const otter_node *nd, int64_t opset) {
    if (nd->n_outputs > 1 && nd->outputs[1][0]) return false;
    if (opset < 7 && otter_node_attr_int(nd, "is_test", 0) == 0) return false;
    if (opset >= 12 && nd->n_inputs > 2 && nd->inputs[2][0]) {
        size_t i = ot_slot_find(s, nd->inputs[2]);
        if (i == OT_NO_INDEX || !ot_slot_is_const(s, i)) return false;
        const otter_tensor *t = s->slots[i].kind == OT_SLOT_CONST ? &s->slots[i].tensor : s->slots[i].init;
        if (!t || t->dtype != OTTER_DTYPE_BOOL || otter_tensor_numel(t) != 1 || ((const uint8_t *)t->data)[0])
            return false;
    }
    return nd->n_inputs >= 1 && nd->inputs[0][0];
}

static bool foldable(const otter_session *s, const ot_exec_node *rn) {
    const otter_node *nd = rn->node;
    if (!ot_is_default_domain(nd->domain) || (rn->def->flags & (OT_OP_NOFOLD | OT_OP_VALUES)) || nd->n_outputs == 0)
        return false;
    if (strncmp(nd->op_type, "Random", 6) == 0 || strcmp(nd->op_type, "Multinomial") == 0 ||
        strcmp(nd->op_type, "Bernoulli") == 0 || strcmp(nd->op_type, "Dropout") == 0)
        return false;
    if (rn->n_subs) return false;
    for (size_t a = 0; a < nd->n_attrs; a++)
        if (nd->attrs[a].type == OTTER_ATTR_GRAPH || nd->attrs[a].type == OTTER_ATTR_GRAPHS) return false;
    for (size_t i = 0; i < nd->n_inputs; i++)
        if (rn->in_slots[i] != OT_NO_INDEX && !ot_slot_is_const(s, rn->in_slots[i])) return false;
    return true;
}

/* Run a node over constants now; on success its outputs become CONST slots. */
static bool try_fold(otter_session *s, ot_exec_node *rn) {
    const otter_node *nd = rn->node;
    s->folding = true;
    otter_status st = ot_exec_node_run(s, rn);
    s->folding = false;
    bool ok = st == OTTER_OK;
    for (size_t o = 0; ok && o < nd->n_outputs; o++) ok = s->slots[rn->out_slots[o]].cur != NULL;
    for (size_t o = 0; o < nd->n_outputs; o++) {
        ot_slot *sl = &s->slots[rn->out_slots[o]];
        if (ok) {
            sl->kind = OT_SLOT_CONST;
            sl->tensor.owns_data = false;
            s->stats.constant_bytes += sl->size;
        } else {
            ot_slot_release(sl);
        }
    }
    if (!ok) otter_clear_error();
    return ok;
}

static otter_status graph_attrs(const otter_node *nd, size_t *n, const otter_graph ***out) {
    *n = 0;
    *out = NULL;
    size_t cap = 0;
    for (size_t a = 0; a < nd->n_attrs; a++) {
        const otter_attr *at = &nd->attrs[a];
        if (at->type == OTTER_ATTR_GRAPH && at->g) {
            OT_TRY(ot_grow((void **)out, &cap, *n + 1, sizeof **out));
            (*out)[(*n)++] = at->g;
        } else if (at->type == OTTER_ATTR_GRAPHS) {
            for (size_t g = 0; g < at->n_graphs; g++) {
                OT_TRY(ot_grow((void **)out, &cap, *n + 1, sizeof **out));
                (*out)[(*n)++] = at->graphs[g];
            }
        }
    }
    return OTTER_OK;
}

/* The schema whose attribute defaults the node's kernel reads: its own, or for an operator derived
 * from an ai.onnx one (the registry's attrs_of) that operator's at the model's ai.onnx opset. */
static const ot_schema *attr_schema(const otter_model *m, const otter_node *nd, int64_t opset) {
    const ot_op_entry *e = ot_op_find(nd->domain, nd->op_type);
    if (e && e->attrs_of) return ot_schema_find("", e->attrs_of, otter_model_opset(m, ""));
    return ot_schema_find(nd->domain, nd->op_type, opset);
}
static otter_status build_node(otter_session *s, size_t k) {
    const otter_node *nd = s->graph->nodes[k];
    ot_exec_node *rn = &s->nodes[k];
    char label[256];
    ot_node_label(nd, k, label, sizeof label);
    rn->index = k;
    rn->node = nd;
    rn->in_slots = ot_calloc(nd->n_inputs + 1, sizeof(size_t));
    rn->out_slots = ot_calloc(nd->n_outputs + 1, sizeof(size_t));
    rn->in_ptrs = ot_calloc(nd->n_inputs + 1, sizeof(otter_tensor *));
    rn->out_ptrs = ot_calloc(nd->n_outputs + 1, sizeof(otter_tensor *));
    if (!rn->in_slots || !rn->out_slots || !rn->in_ptrs || !rn->out_ptrs) return OT_NOMEM();
    for (size_t i = 0; i < nd->n_inputs; i++) {
        rn->in_slots[i] = OT_NO_INDEX;
        if (!nd->inputs[i][0]) continue;
        if (resolve(s, nd->inputs[i], &rn->in_slots[i]) != OTTER_OK)
            return ot_error(OTTER_ERR_INVALID, "node %s: input '%s' is not defined before this node", label,
                            nd->inputs[i]);
    }
    /* names its subgraphs read from here or further out */
    OT_TRY(graph_attrs(nd, &rn->n_subs, &rn->sub_graphs));
    if (rn->n_subs) {
        ot_strmap seen = {0};
        const char **names = NULL;
        size_t nn = 0, nc = 0;
        otter_status st = OTTER_OK;
        for (size_t g = 0; g < rn->n_subs && !st; g++) st = free_vars(rn->sub_graphs[g], &seen, &names, &nn, &nc);
        if (!st) rn->outer_reads = ot_calloc(nn + 1, sizeof(size_t));
        if (!st && !rn->outer_reads) st = OT_NOMEM();
        for (size_t i = 0; i < nn && !st; i++) {
            if (resolve(s, names[i], &rn->outer_reads[i]) != OTTER_OK)
                st = ot_error(OTTER_ERR_INVALID,
                              "node %s: a subgraph reads '%s', which is not defined before this node", label, names[i]);
            else
                rn->n_outer_reads++;
        }
        ot_strmap_free(&seen);
        ot_free(names);
        OT_TRY(st);
        rn->subs = ot_calloc(rn->n_subs, sizeof *rn->subs);
        if (!rn->subs) return OT_NOMEM();
    }
    int64_t opset = model_opset(s->model, nd->domain);
    const char *dom = ot_is_default_domain(nd->domain) ? "ai.onnx" : nd->domain;
    bool optimize = s->opts.opt_level >= 1;
    /* Identity and inference Dropout: the output names the input's value */
    if (optimize && ot_is_default_domain(nd->domain) && nd->n_outputs >= 1 && nd->outputs[0][0] &&
        ((strcmp(nd->op_type, "Identity") == 0 && nd->n_inputs == 1 && nd->inputs[0][0] && nd->n_outputs == 1) ||
         (strcmp(nd->op_type, "Dropout") == 0 && inference_dropout(s, nd, opset)))) {
        if (ot_slot_find(s, nd->outputs[0]) != OT_NO_INDEX)
            return ot_error(OTTER_ERR_INVALID, "node %s: output '%s' is already defined", label, nd->outputs[0]);
        OT_TRY(add_alias(s, nd->outputs[0], rn->in_slots[0]));
        s->stats.n_dropped++;
        return OTTER_OK;
    }
    if (opset <= 0) return ot_error(OTTER_ERR_INVALID, "node %s: the model does not import domain '%s'", label, dom);
    rn->def = ot_op_lookup(nd->domain, nd->op_type, opset);
    if (!rn->def) {
        const ot_op_def *later = ot_op_lookup(nd->domain, nd->op_type, INT64_MAX);
        if (later)
            return ot_error(OTTER_ERR_UNSUPPORTED,
                            "node %s: operator %s of domain '%s' at opset %lld is not implemented (otter has it "
                            "from opset %d)",
                            label, nd->op_type, dom, (long long)opset, later->since_version);
        return ot_error(OTTER_ERR_UNSUPPORTED, "node %s: operator %s of domain '%s' (opset %lld) is not implemented",
                        label, nd->op_type, dom, (long long)opset);
    }
    for (size_t o = 0; o < nd->n_outputs; o++) {
        const char *name = nd->outputs[o];
        if (name[0] && ot_slot_find(s, name) != OT_NO_INDEX)
            return ot_error(OTTER_ERR_INVALID, "node %s: output '%s' is already defined", label, name);
        OT_TRY(add_slot(s, name, OT_SLOT_VALUE, &rn->out_slots[o]));
    }
    rn->ctx = (ot_kernel_ctx){.node = nd,
                              .schema = attr_schema(s->model, nd, opset),
                              .model = s->model,
                              .opset = opset,
                              .n_inputs = nd->n_inputs,
                              .inputs = rn->in_ptrs,
                              .n_outputs = nd->n_outputs,
                              .outputs = rn->out_ptrs,
                              .n_threads = s->n_threads,
                              .winograd = s->opts.opt_level >= 3   ? 4
                                          : s->opts.opt_level == 2 ? 2
                                                                   : 0,
                              .runtime = s};
    if (optimize && foldable(s, rn) && try_fold(s, rn)) {
        s->stats.n_folded++;
        return OTTER_OK;
    }
    rn->alive = true;
    size_t e = s->n_order++;
    s->order[e] = k;
    for (size_t o = 0; o < nd->n_outputs; o++) {
        s->slots[rn->out_slots[o]].producer = e;
        s->slots[rn->out_slots[o]].last_use = e;
    }
    return OTTER_OK;
}

static otter_status add_sym(otter_session *s, const char *param, size_t *cap, int *out) {
    for (size_t i = 0; i < s->n_syms; i++)
        if (strcmp(s->syms[i].param, param) == 0) {
            *out = (int)i;
            return OTTER_OK;
        }
    OT_TRY(ot_grow((void **)&s->syms, cap, s->n_syms + 1, sizeof *s->syms));
    s->syms[s->n_syms] = (ot_dim_sym){param, 0, false};
    *out = (int)s->n_syms++;
    return OTTER_OK;
}

static otter_status build(otter_session *s) {
    const otter_graph *g = s->graph;
    size_t cap = 0;
    /* initializers first, so inputs that are also initializers become overridable */
    for (size_t i = 0; i < g->n_initializers; i++) {
        const otter_tensor *t = g->initializers[i];
        if (ot_str_empty(t->name)) return ot_error(OTTER_ERR_INVALID, "initializer %zu has no name", i);
        if (ot_slot_find(s, t->name) != OT_NO_INDEX)
            return ot_error(OTTER_ERR_INVALID, "initializer '%s' is defined twice", t->name);
        size_t si;
        OT_TRY(add_slot(s, t->name, OT_SLOT_INIT, &si));
        s->slots[si].init = t;
        s->slots[si].cur = (otter_tensor *)(uintptr_t)t;
    }
    s->all_inputs = ot_calloc(g->n_inputs + 1, sizeof(size_t));
    s->inputs = ot_calloc(g->n_inputs + 1, sizeof(size_t));
    if (!s->all_inputs || !s->inputs) return OT_NOMEM();
    for (size_t i = 0; i < g->n_inputs; i++) {
        const otter_value *v = &g->inputs[i];
        if (ot_str_empty(v->name)) return ot_error(OTTER_ERR_INVALID, "graph input %zu has no name", i);
        size_t si = ot_slot_find(s, v->name);
        if (si != OT_NO_INDEX && s->slots[si].kind == OT_SLOT_INIT && !s->slots[si].decl) {
            s->slots[si].decl = v;
        } else if (si != OT_NO_INDEX) {
            return ot_error(OTTER_ERR_INVALID, "graph input '%s' is defined twice", v->name);
        } else {
            OT_TRY(add_slot(s, v->name, OT_SLOT_INPUT, &si));
            s->slots[si].decl = v;
            s->inputs[s->n_inputs++] = si;
        }
        s->all_inputs[s->n_all_inputs++] = si;
        if (v->has_type && v->type.kind != OTTER_TYPE_TENSOR && v->type.kind != OTTER_TYPE_NONE &&
            v->type.kind != OTTER_TYPE_SEQUENCE && v->type.kind != OTTER_TYPE_OPTIONAL)
            return ot_error(
                OTTER_ERR_UNSUPPORTED,
                "graph input '%s' is a map or a sparse tensor (otter runs tensors, sequences and optionals)", v->name);
        if (v->has_type && v->type.kind == OTTER_TYPE_TENSOR && v->type.rank > 0) {
            int *ds = ot_calloc((size_t)v->type.rank, sizeof(int));
            if (!ds) return OT_NOMEM();
            s->slots[si].dim_sym = ds;
            for (int d = 0; d < v->type.rank; d++) {
                ds[d] = -1;
                if (v->type.dims[d].value < 0 && !ot_str_empty(v->type.dims[d].param))
                    OT_TRY(add_sym(s, v->type.dims[d].param, &cap, &ds[d]));
            }
        }
    }
    s->nodes = ot_calloc(g->n_nodes + 1, sizeof *s->nodes);
    s->order = ot_calloc(g->n_nodes + 1, sizeof *s->order);
    if (!s->nodes || !s->order) return OT_NOMEM();
    s->n_nodes = g->n_nodes;
    s->stats.n_nodes_model = g->n_nodes;
    for (size_t k = 0; k < g->n_nodes; k++) OT_TRY(build_node(s, k));
    s->outputs = ot_calloc(g->n_outputs + 1, sizeof(size_t));
    if (!s->outputs) return OT_NOMEM();
    for (size_t i = 0; i < g->n_outputs; i++) {
        const otter_value *v = &g->outputs[i];
        size_t si;
        if (ot_str_empty(v->name) || resolve(s, v->name, &si) != OTTER_OK)
            return ot_error(OTTER_ERR_INVALID, "graph output '%s' is not produced by the graph",
                            v->name ? v->name : "");
        s->outputs[s->n_outputs++] = si;
        ot_slot *t = ot_slot_target(s, si);
        if (t->kind == OT_SLOT_VALUE) t->last_use = OT_LIVE_FOREVER;
    }
    /* liveness: the last node reading each value (aliases resolved) */
    for (size_t e = 0; e < s->n_order; e++) {
        ot_exec_node *rn = &s->nodes[s->order[e]];
        for (size_t j = 0; j < rn->node->n_inputs + rn->n_outer_reads; j++) {
            size_t si = j < rn->node->n_inputs ? rn->in_slots[j] : rn->outer_reads[j - rn->node->n_inputs];
            if (si == OT_NO_INDEX) continue;
            ot_slot *t = ot_slot_target(s, si);
            /* values of an enclosing graph are kept alive by the enclosing node */
            if (t->kind == OT_SLOT_VALUE && t >= s->slots && t < s->slots + s->n_slots &&
                t->last_use != OT_LIVE_FOREVER && t->last_use < e)
                t->last_use = e;
        }
    }
    for (size_t i = 0; i < s->n_slots; i++) {
        ot_slot *t = &s->slots[i];
        if (t->kind != OT_SLOT_VALUE || t->last_use == OT_LIVE_FOREVER || t->last_use == OT_NO_INDEX) continue;
        ot_exec_node *rn = &s->nodes[s->order[t->last_use]];
        OT_TRY(ot_grow((void **)&rn->dying, &rn->cap_dying, rn->n_dying + 1, sizeof(size_t)));
        rn->dying[rn->n_dying++] = i;
    }
    /* sub-sessions, now that every slot they may point at exists */
    for (size_t k = 0; k < s->n_nodes; k++) {
        ot_exec_node *rn = &s->nodes[k];
        for (size_t g2 = 0; g2 < rn->n_subs && rn->alive; g2++) {
            otter_session *c = ot_calloc(1, sizeof *c);
            if (!c) return OT_NOMEM();
            rn->subs[g2] = c;
            c->model = s->model;
            c->graph = rn->sub_graphs[g2];
            c->parent = s;
            c->opts = s->opts;
            c->budget = s->budget; /* each body is held to the budget on its own */
            c->pool = s->pool;
            c->n_threads = s->n_threads;
            otter_status st = build(c);
            if (st != OTTER_OK) {
                char label[256];
                ot_node_label(rn->node, k, label, sizeof label);
                return ot_error_context(st, "node %s, subgraph '%s': ", label, c->graph->name ? c->graph->name : "");
            }
        }
    }
    s->key = ot_calloc(2 * s->n_all_inputs + 2, sizeof *s->key);
    if (!s->key) return OT_NOMEM();
    s->stats.n_nodes = s->n_order;
    return OTTER_OK;
}

void otter_session_free(otter_session *s) {
    if (!s) return;
    for (size_t k = 0; k < s->n_nodes; k++) {
        ot_exec_node *rn = &s->nodes[k];
        for (size_t g = 0; g < rn->n_subs && rn->subs; g++) otter_session_free(rn->subs[g]);
        ot_exec_node_free_scratch(rn);
        ot_free(rn->scratch_heap);
        if (rn->cache) rn->cache_free(rn->cache);
        ot_free(rn->subs);
        ot_free(rn->sub_graphs);
        ot_free(rn->in_slots);
        ot_free(rn->out_slots);
        ot_free(rn->in_ptrs);
        ot_free(rn->out_ptrs);
        ot_free(rn->outer_reads);
        ot_free(rn->dying);
    }
    for (size_t i = 0; i < s->n_slots; i++) {
        if (s->slots[i].kind == OT_SLOT_VALUE || s->slots[i].kind == OT_SLOT_CONST) ot_slot_release(&s->slots[i]);
        ot_free(s->slots[i].dim_sym);
    }
    if (s->owns_pool) ot_pool_free(s->pool);
    ot_free(s->nodes);
    ot_free(s->order);
    ot_free(s->slots);
    ot_strmap_free(&s->names);
    ot_free(s->inputs);
    ot_free(s->all_inputs);
    ot_free(s->outputs);
    ot_free(s->syms);
    ot_free(s->key);
    ot_free(s->arena_mem);
    ot_plans_free(s);
    otter_model_free(s->owned_model);
    otter_model_free(s->fused_model);
    ot_free(s);
}

otter_status otter_session_create(otter_session **out, const otter_model *m, const otter_session_options *opts) {
    if (!out) return ot_error(OTTER_ERR_ARGUMENT, "otter_session_create: out is NULL");
    *out = NULL;
    if (!m || !m->graph) return ot_error(OTTER_ERR_ARGUMENT, "otter_session_create: no model or graph");
    otter_session *s = ot_calloc(1, sizeof *s);
    if (!s) return OT_NOMEM();
    if (opts) s->opts = *opts;
    if (!s->opts.opt_level_set && s->opts.opt_level == 0) s->opts.opt_level = 2;
    int n = s->opts.n_threads;
    if (n <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    s->n_threads = n;
    s->budget = s->opts.max_memory_bytes;
    if (s->budget == 0) {
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        s->budget = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : SIZE_MAX;
    }
    otter_status st = s->opts.opt_level >= 2 ? ot_fuse_model(m, !s->opts.no_fold_initializers, &s->fused_model, NULL)
                                             : OTTER_OK; /* fuse.c: a copy with fused nodes, or NULL */
    s->model = s->fused_model ? s->fused_model : m;
    s->graph = s->model->graph;
    ot_gemm_session_start();
    if (st == OTTER_OK) st = ot_pool_create(&s->pool, n);
    if (st == OTTER_OK) {
        s->owns_pool = true;
        st = build(s);
    }
    if (st != OTTER_OK) {
        otter_session_free(s);
        return st;
    }
    *out = s;
    return OTTER_OK;
}

otter_status otter_session_create_from_file(otter_session **out, const char *path, const otter_session_options *opts) {
    if (!out) return ot_error(OTTER_ERR_ARGUMENT, "otter_session_create_from_file: out is NULL");
    *out = NULL;
    otter_model *m = NULL;
    OT_TRY(otter_model_load(&m, path));
    otter_status st = otter_session_create(out, m, opts);
    if (st != OTTER_OK) {
        otter_model_free(m);
        return ot_error_context(st, "%s: ", path);
    }
    (*out)->owned_model = m;
    return OTTER_OK;
}

otter_status otter_session_create_from_memory(otter_session **out, const void *data, size_t size,
                                              const otter_session_options *opts) {
    if (!out) return ot_error(OTTER_ERR_ARGUMENT, "otter_session_create_from_memory: out is NULL");
    *out = NULL;
    otter_model *m = NULL;
    OT_TRY(otter_model_load_from_memory(&m, data, size, NULL));
    otter_status st = otter_session_create(out, m, opts);
    if (st != OTTER_OK) {
        otter_model_free(m);
        return st;
    }
    (*out)->owned_model = m;
    return OTTER_OK;
}

/* ---- queries --------------------------------------------------------------------------------- */

const otter_model *otter_session_model(const otter_session *s) { return s->model; }
int otter_session_threads(const otter_session *s) { return s->n_threads; }
size_t otter_session_input_count(const otter_session *s) { return s->n_inputs; }
size_t otter_session_output_count(const otter_session *s) { return s->n_outputs; }
const char *otter_session_input_name(const otter_session *s, size_t i) {
    return i < s->n_inputs ? s->slots[s->inputs[i]].name : NULL;
}
const char *otter_session_output_name(const otter_session *s, size_t i) {
    return i < s->n_outputs ? s->graph->outputs[i].name : NULL;
}
const otter_type *otter_session_input_type(const otter_session *s, size_t i) {
    if (i >= s->n_inputs) return NULL;
    const otter_value *v = s->slots[s->inputs[i]].decl;
    return v && v->has_type ? &v->type : NULL;
}
const otter_type *otter_session_output_type(const otter_session *s, size_t i) {
    if (i >= s->n_outputs) return NULL;
    const otter_value *v = &s->graph->outputs[i];
    return v->has_type ? &v->type : NULL;
}

otter_status otter_session_memory_stats(const otter_session *s, otter_memory_stats *out) {
    if (!s || !out) return ot_error(OTTER_ERR_ARGUMENT, "otter_session_memory_stats: NULL argument");
    *out = s->stats;
    return OTTER_OK;
}

size_t otter_session_profile(const otter_session *s, otter_node_profile *out, size_t cap) {
    if (!s || !s->opts.profile) return 0;
    size_t n = 0;
    for (size_t k = 0; k < s->n_order; k++) {
        const ot_exec_node *rn = &s->nodes[s->order[k]];
        if (!rn->prof_calls) continue;
        if (out && n < cap)
            out[n] = (otter_node_profile){.name = rn->node->name ? rn->node->name : "",
                                          .op_type = rn->node->op_type,
                                          .calls = rn->prof_calls,
                                          .total_ms = (double)rn->prof_ns * 1e-6};
        n++;
    }
    return n;
}
