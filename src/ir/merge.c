/* otter_model_merge and otter_model_concat: two graphs into one, wired (merge) or side by side
 * (concat), with optional name prefixes. */
#include <string.h>

#include "core/core.h"
#include "ir/edit_internal.h"
#include "otter/edit.h"
#include "otter/print.h"

/* Compatible when nothing known contradicts: same kind, same element type, same rank and equal
 * fixed dims where both sides give them. */
static bool types_compatible(const otter_type *a, const otter_type *b) {
    if (!a || !b || a->kind == OTTER_TYPE_NONE || b->kind == OTTER_TYPE_NONE) return true;
    if (a->kind != b->kind) return false;
    if (a->kind == OTTER_TYPE_TENSOR || a->kind == OTTER_TYPE_SPARSE_TENSOR) {
        if (a->has_elem_type && b->has_elem_type && a->elem_type != b->elem_type) return false;
        if (a->rank >= 0 && b->rank >= 0) {
            if (a->rank != b->rank) return false;
            for (int i = 0; i < a->rank; i++) {
                const otter_dim *x = &a->dims[i], *y = &b->dims[i];
                if (x->value >= 0 && y->value >= 0 && x->value != y->value) return false;
            }
        }
        return true;
    }
    if (a->kind == OTTER_TYPE_MAP && a->elem_type != b->elem_type) return false;
    return types_compatible(a->elem, b->elem);
}

static const otter_type *value_type(const otter_value *v) { return v->has_type ? &v->type : NULL; }

static ptrdiff_t find_value(const otter_value *vs, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (ot_streq(vs[i].name, name)) return (ptrdiff_t)i;
    return -1;
}

/* Every name g defines (inputs, initializers, node outputs) into map, with bit 1 set for inputs. */
static otter_status defined_names(const otter_graph *g, ot_strmap *map) {
    OT_TRY(ot_strmap_reserve(map, g->n_inputs + g->n_initializers + 2 * g->n_nodes));
    otter_status s = OTTER_OK;
    for (size_t i = 0; i < g->n_initializers && s == OTTER_OK; i++)
        if (!ot_str_empty(g->initializers[i]->name)) s = ot_strmap_put(map, g->initializers[i]->name, 0);
    for (size_t i = 0; i < g->n_nodes && s == OTTER_OK; i++)
        for (size_t j = 0; j < g->nodes[i]->n_outputs && s == OTTER_OK; j++)
            if (!ot_str_empty(g->nodes[i]->outputs[j])) s = ot_strmap_put(map, g->nodes[i]->outputs[j], 0);
    for (size_t i = 0; i < g->n_inputs && s == OTTER_OK; i++) {
        if (ot_strmap_has(map, g->inputs[i].name)) continue; /* initializer with a default: not plain */
        s = ot_strmap_put(map, g->inputs[i].name, 1);
    }
    if (s != OTTER_OK) ot_strmap_free(map);
    return s;
}

/* Move the value arrays, nodes and initializers of b's graph into a's; wired inputs of b are
 * gone already. Shared inputs (same name and type in both) are kept once. */
static otter_status move_graph(otter_graph *ga, otter_graph *gb, bool a_outputs_first, bool keep_a_outputs,
                               const bool *a_output_wired) {
    for (size_t i = 0; i < gb->n_inputs; i++) {
        if (otter_graph_find_input(ga, gb->inputs[i].name) >= 0) {
            ot_value_clear(&gb->inputs[i]);
            continue;
        }
        OT_TRY(ot_values_push(&ga->inputs, &ga->n_inputs, &ga->cap_inputs, gb->inputs[i]));
        memset(&gb->inputs[i], 0, sizeof gb->inputs[i]);
    }
    gb->n_inputs = 0;
    for (size_t i = 0; i < gb->n_value_info; i++) {
        OT_TRY(ot_values_push(&ga->value_info, &ga->n_value_info, &ga->cap_value_info, gb->value_info[i]));
        memset(&gb->value_info[i], 0, sizeof gb->value_info[i]);
    }
    gb->n_value_info = 0;
    OT_TRY(ot_grow((void **)&ga->nodes, &ga->cap_nodes, ga->n_nodes + gb->n_nodes, sizeof *ga->nodes));
    for (size_t i = 0; i < gb->n_nodes; i++) ga->nodes[ga->n_nodes++] = gb->nodes[i];
    gb->n_nodes = 0;
    OT_TRY(ot_grow((void **)&ga->initializers, &ga->cap_initializers, ga->n_initializers + gb->n_initializers,
                   sizeof *ga->initializers));
    for (size_t i = 0; i < gb->n_initializers; i++) ga->initializers[ga->n_initializers++] = gb->initializers[i];
    gb->n_initializers = 0;

    /* Outputs: A's kept ones and B's, in the order asked for. Wired A outputs become value_info. */
    otter_value *outs = NULL;
    size_t n_outs = 0, cap_outs = 0;
    otter_status s = OTTER_OK;
    for (int pass = 0; pass < 2 && s == OTTER_OK; pass++) {
        bool take_a = (pass == 0) == a_outputs_first;
        if (take_a) {
            for (size_t i = 0; i < ga->n_outputs && s == OTTER_OK; i++) {
                if (!a_output_wired[i] && !keep_a_outputs) continue;
                if (a_output_wired[i]) {
                    if (!ga->outputs[i].has_type ||
                        find_value(ga->value_info, ga->n_value_info, ga->outputs[i].name) >= 0)
                        continue;
                    s = ot_values_push(&ga->value_info, &ga->n_value_info, &ga->cap_value_info, ga->outputs[i]);
                } else {
                    s = ot_values_push(&outs, &n_outs, &cap_outs, ga->outputs[i]);
                }
                if (s == OTTER_OK) memset(&ga->outputs[i], 0, sizeof ga->outputs[i]);
            }
        } else {
            for (size_t i = 0; i < gb->n_outputs && s == OTTER_OK; i++) {
                s = ot_values_push(&outs, &n_outs, &cap_outs, gb->outputs[i]);
                if (s == OTTER_OK) memset(&gb->outputs[i], 0, sizeof gb->outputs[i]);
            }
        }
    }
    /* What was not moved (dropped A outputs) is cleared; then the new list replaces A's. */
    for (size_t i = 0; i < ga->n_outputs; i++) ot_value_clear(&ga->outputs[i]);
    ot_free(ga->outputs);
    ga->outputs = outs;
    ga->n_outputs = n_outs;
    ga->cap_outputs = cap_outs;
    return s;
}

static otter_status remove_input(otter_graph *g, size_t idx) {
    ot_value_clear(&g->inputs[idx]);
    memmove(&g->inputs[idx], &g->inputs[idx + 1], (g->n_inputs - idx - 1) * sizeof *g->inputs);
    g->n_inputs--;
    return OTTER_OK;
}

static otter_status merge_models(otter_model *ma, otter_model *mb, const otter_wire *wires, size_t n_wires,
                                 const char *prefix_a, const char *prefix_b, bool keep_a_outputs,
                                 bool a_outputs_first) {
    otter_graph *ga = ma->graph, *gb = mb->graph;
    OT_TRY(otter_graph_add_prefix(ga, prefix_a, true));
    OT_TRY(otter_graph_add_prefix(gb, prefix_b, true));
    const char *pa = prefix_a ? prefix_a : "", *pb = prefix_b ? prefix_b : "";

    bool *a_wired = ot_calloc(ga->n_outputs + 1, sizeof(bool));
    char **an = ot_calloc(n_wires + 1, sizeof(char *)), **bn = ot_calloc(n_wires + 1, sizeof(char *));
    ot_strmap def_a = {0}, def_b = {0};
    otter_status s = (!a_wired || !an || !bn) ? OT_NOMEM() : OTTER_OK;

    /* 1. Each wire joins an output of A to an input of B with a compatible type. */
    for (size_t w = 0; w < n_wires && s == OTTER_OK; w++) {
        const char *ao = wires[w].a_output, *bi = wires[w].b_input;
        if (ot_str_empty(ao) || ot_str_empty(bi)) {
            s = ot_error(OTTER_ERR_ARGUMENT, "wire %zu: empty tensor name", w + 1);
            break;
        }
        an[w] = ot_sprintf("%s%s", pa, ao);
        bn[w] = ot_sprintf("%s%s", pb, bi);
        if (!an[w] || !bn[w]) {
            s = OT_NOMEM();
            break;
        }
        ptrdiff_t oa = otter_graph_find_output(ga, an[w]);
        ptrdiff_t ib = otter_graph_find_input(gb, bn[w]);
        if (oa < 0)
            s = ot_error(OTTER_ERR_NOT_FOUND, "wire '%s:%s': '%s' is not an output of the first graph '%s'", ao, bi, ao,
                         ga->name ? ga->name : "");
        else if (ib < 0)
            s = ot_error(OTTER_ERR_NOT_FOUND, "wire '%s:%s': '%s' is not an input of the second graph '%s'", ao, bi, bi,
                         gb->name ? gb->name : "");
        else if (!types_compatible(value_type(&ga->outputs[oa]), value_type(&gb->inputs[ib]))) {
            char *ta = NULL, *tb = NULL;
            otter_type_to_text(&ga->outputs[oa].type, &ta);
            otter_type_to_text(&gb->inputs[ib].type, &tb);
            s = ot_error(OTTER_ERR_INVALID, "wire '%s:%s': output '%s' has type %s but input '%s' has type %s", ao, bi,
                         ao, ta ? ta : "?", bi, tb ? tb : "?");
            ot_free(ta);
            ot_free(tb);
        } else {
            for (size_t v = 0; v < w && s == OTTER_OK; v++)
                if (ot_streq(bn[v], bn[w]))
                    s = ot_error(OTTER_ERR_ARGUMENT, "input '%s' of the second graph is wired twice", bi);
            if (s == OTTER_OK) a_wired[oa] = true;
        }
    }

    /* 2. No name may be defined by both graphs, except an input both have with the same type. */
    if (s == OTTER_OK) s = defined_names(ga, &def_a);
    if (s == OTTER_OK) s = defined_names(gb, &def_b);
    for (size_t i = 0; i < def_b.cap && s == OTTER_OK; i++) {
        const char *name = def_b.keys[i];
        if (!name) continue;
        bool wired = false;
        for (size_t w = 0; w < n_wires; w++) wired = wired || ot_streq(bn[w], name);
        intptr_t in_a = 0;
        if (wired || !ot_strmap_get(&def_a, name, &in_a)) continue;
        if (in_a == 1 && def_b.values[i] == 1) {
            const otter_type *ta = otter_graph_value_type(ga, name), *tb = otter_graph_value_type(gb, name);
            if ((ta == NULL) == (tb == NULL) && (!ta || otter_type_equal(ta, tb))) continue; /* shared input */
            s = ot_error(OTTER_ERR_INVALID, "input '%s' is in both graphs with different types (use a prefix)", name);
        } else {
            s = ot_error(OTTER_ERR_INVALID, "tensor '%s' is defined in both graphs (use a prefix to rename one side)",
                         name);
        }
    }
    for (size_t w = 0; w < n_wires && s == OTTER_OK; w++)
        if (!ot_streq(an[w], bn[w]) && ot_strmap_has(&def_b, an[w]))
            s = ot_error(OTTER_ERR_INVALID,
                         "wire '%s:%s': the second graph already defines '%s' (use a prefix to rename one side)",
                         wires[w].a_output, wires[w].b_input, an[w]);

    /* 3. In B, the wired inputs become reads of A's outputs. */
    for (size_t w = 0; w < n_wires && s == OTTER_OK; w++) {
        ptrdiff_t ib = otter_graph_find_input(gb, bn[w]);
        OT_ASSERT(ib >= 0);
        s = remove_input(gb, (size_t)ib);
        ptrdiff_t init = otter_graph_find_initializer(gb, bn[w]);
        if (s == OTTER_OK && init >= 0) s = otter_graph_delete_initializer(gb, bn[w]);
        ptrdiff_t vi;
        while (s == OTTER_OK && (vi = otter_graph_find_value_info(gb, bn[w])) >= 0) {
            ot_value_clear(&gb->value_info[vi]);
            memmove(&gb->value_info[vi], &gb->value_info[vi + 1],
                    (gb->n_value_info - (size_t)vi - 1) * sizeof *gb->value_info);
            gb->n_value_info--;
        }
        if (s == OTTER_OK && !ot_streq(an[w], bn[w])) {
            s = ot_graph_rename_reads(gb, bn[w], an[w]);
            for (size_t o = 0; o < gb->n_outputs && s == OTTER_OK; o++)
                if (ot_streq(gb->outputs[o].name, bn[w])) {
                    char *c = ot_strdup(an[w]);
                    if (!c)
                        s = OT_NOMEM();
                    else {
                        ot_free(gb->outputs[o].name);
                        gb->outputs[o].name = c;
                    }
                }
        }
    }

    /* 4. Move B into A; model-level fields. */
    if (s == OTTER_OK) s = move_graph(ga, gb, a_outputs_first, keep_a_outputs, a_wired);
    if (s == OTTER_OK && mb->has_ir_version && (!ma->has_ir_version || mb->ir_version > ma->ir_version)) {
        ma->has_ir_version = true;
        ma->ir_version = mb->ir_version;
    }
    for (size_t i = 0; i < mb->n_opsets && s == OTTER_OK; i++) {
        int64_t have = otter_model_opset(ma, mb->opsets[i].domain);
        if (mb->opsets[i].version > have) s = otter_model_set_opset(ma, mb->opsets[i].domain, mb->opsets[i].version);
    }
    for (size_t i = 0; i < mb->n_metadata && s == OTTER_OK; i++) {
        bool have = false;
        for (size_t k = 0; k < ma->n_metadata; k++) have = have || ot_streq(ma->metadata[k].key, mb->metadata[i].key);
        if (!have) s = otter_model_set_metadata(ma, mb->metadata[i].key, mb->metadata[i].value);
    }
    if (s == OTTER_OK && mb->n_functions > 0) {
        otter_bytes *f = ot_realloc(ma->functions, (ma->n_functions + mb->n_functions) * sizeof *f);
        if (!f)
            s = OT_NOMEM();
        else {
            memcpy(f + ma->n_functions, mb->functions, mb->n_functions * sizeof *f);
            ma->functions = f;
            ma->n_functions += mb->n_functions;
            mb->n_functions = 0;
        }
    }

    for (size_t w = 0; w < n_wires; w++) {
        if (an) ot_free(an[w]);
        if (bn) ot_free(bn[w]);
    }
    ot_free(an);
    ot_free(bn);
    ot_free(a_wired);
    ot_strmap_free(&def_a);
    ot_strmap_free(&def_b);
    return s;
}

static otter_status merge_entry(otter_model **out, const otter_model *a, const otter_model *b, const otter_wire *wires,
                                size_t n_wires, const char *prefix_a, const char *prefix_b, bool keep_a_outputs,
                                bool a_outputs_first, const char *graph_name) {
    if (!out || !a || !b || !a->graph || !b->graph || (n_wires && !wires))
        return ot_error(OTTER_ERR_ARGUMENT, "merge: a model, its graph or the wires are NULL");
    *out = NULL;
    otter_model *ma = NULL, *mb = NULL;
    OT_TRY(otter_model_clone(&ma, a));
    otter_status s = otter_model_clone(&mb, b);
    if (s == OTTER_OK) s = merge_models(ma, mb, wires, n_wires, prefix_a, prefix_b, keep_a_outputs, a_outputs_first);
    if (s == OTTER_OK) {
        char *name = graph_name ? ot_strdup(graph_name)
                                : ot_sprintf("%s_%s", a->graph->name ? a->graph->name : "a",
                                             b->graph->name ? b->graph->name : "b");
        if (!name)
            s = OT_NOMEM();
        else {
            ot_free(ma->graph->name);
            ma->graph->name = name;
        }
    }
    otter_model_free(mb);
    if (s != OTTER_OK) {
        otter_model_free(ma);
        return s;
    }
    *out = ma;
    return OTTER_OK;
}

otter_status otter_model_merge(otter_model **out, const otter_model *a, const otter_model *b, const otter_wire *wires,
                               size_t n_wires, const otter_merge_options *opts) {
    otter_merge_options o = {0};
    if (opts) o = *opts;
    otter_status s =
        merge_entry(out, a, b, wires, n_wires, o.prefix_a, o.prefix_b, o.keep_a_outputs, false, o.graph_name);
    if (s != OTTER_OK) ot_error_context(s, "merge: ");
    return s;
}

otter_status otter_model_concat(otter_model **out, const otter_model *a, const otter_model *b, const char *prefix_a,
                                const char *prefix_b) {
    otter_status s = merge_entry(out, a, b, NULL, 0, prefix_a, prefix_b, true, true, NULL);
    if (s != OTTER_OK) ot_error_context(s, "concat: ");
    return s;
}
