/* Graphviz DOT rendering of a graph (see otter/print.h). */
#include <string.h>

#include "core/core.h"
#include "ir/edit_internal.h"
#include "otter/print.h"

/* A DOT string body: quotes and backslashes escaped, newlines as \n. */
static void put_esc(ot_sb *b, const char *s) {
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\')
            ot_sb_printf(b, "\\%c", *s);
        else if (*s == '\n')
            ot_sb_puts(b, "\\n");
        else
            ot_sb_printf(b, "%c", *s);
    }
}

/* "name\ntype" for a tensor, type only when declared. */
static void put_tensor_label(ot_sb *b, const char *name, const otter_type *t) {
    put_esc(b, name);
    if (t && t->kind != OTTER_TYPE_NONE) {
        char *txt = NULL;
        if (otter_type_to_text(t, &txt) != OTTER_OK) {
            b->failed = true;
            return;
        }
        ot_sb_puts(b, "\\n");
        put_esc(b, txt);
        ot_free(txt);
    }
}

static void put_init_type(ot_sb *b, const otter_tensor *t) {
    ot_sb_printf(b, "\\n%s[", otter_dtype_name(t->dtype));
    for (int i = 0; i < t->rank; i++) ot_sb_printf(b, "%s%lld", i ? "," : "", (long long)t->dims[i]);
    ot_sb_puts(b, "]");
}

enum { SRC_NODE = 0, SRC_INPUT = 1, SRC_INIT = 2 };
#define SRC_KIND(v)  ((v)&3u)
#define SRC_INDEX(v) ((v) >> 2)
#define SRC(kind, i) (((size_t)(i) << 2) | (kind))

struct dot_ctx {
    ot_sb *b;
    const otter_graph *g;
    const otter_dot_options *o;
    ot_strmap src;   /* tensor -> SRC(kind, index) */
    ot_strmap outer; /* names read but defined nowhere in g (outer scope or dangling) already drawn */
    size_t reader;
};

static void put_src_id(ot_sb *b, size_t v, const otter_graph *g) {
    switch (SRC_KIND(v)) {
    case SRC_NODE:
        ot_sb_printf(b, "\"n%zu\"", SRC_INDEX(v));
        break;
    case SRC_INPUT:
        ot_sb_puts(b, "\"in:");
        put_esc(b, g->inputs[SRC_INDEX(v)].name);
        ot_sb_puts(b, "\"");
        break;
    default:
        ot_sb_puts(b, "\"init:");
        put_esc(b, g->initializers[SRC_INDEX(v)]->name);
        ot_sb_puts(b, "\"");
        break;
    }
}

static otter_status draw_edge(const char *name, void *user) {
    struct dot_ctx *c = user;
    ot_sb *b = c->b;
    intptr_t v;
    if (!ot_strmap_get(&c->src, name, &v)) {
        /* Defined outside this graph: draw a plain label once. */
        if (!ot_strmap_has(&c->outer, name)) {
            OT_TRY(ot_strmap_put(&c->outer, name, 0));
            ot_sb_puts(b, "  \"ext:");
            put_esc(b, name);
            ot_sb_puts(b, "\" [shape=plaintext, label=\"");
            put_esc(b, name);
            ot_sb_puts(b, "\"];\n");
        }
        ot_sb_puts(b, "  \"ext:");
        put_esc(b, name);
        ot_sb_printf(b, "\" -> \"n%zu\" [style=dotted];\n", c->reader);
        return OTTER_OK;
    }
    if (SRC_KIND(v) == SRC_INIT && c->o->hide_initializers) return OTTER_OK;
    ot_sb_puts(b, "  ");
    put_src_id(b, v, c->g);
    ot_sb_printf(b, " -> \"n%zu\"", c->reader);
    if (SRC_KIND(v) == SRC_NODE) {
        ot_sb_puts(b, " [label=\"");
        put_tensor_label(b, name, otter_graph_value_type(c->g, name));
        ot_sb_puts(b, "\"]");
    } else if (SRC_KIND(v) == SRC_INIT) {
        ot_sb_puts(b, " [style=dashed]");
    }
    ot_sb_puts(b, ";\n");
    return OTTER_OK;
}

static void draw_node(struct dot_ctx *c, size_t i) {
    ot_sb *b = c->b;
    const otter_node *n = c->g->nodes[i];
    ot_sb_printf(b, "  \"n%zu\" [shape=box, style=\"rounded,filled\", fillcolor=\"#fff3cd\", label=\"", i);
    if (!ot_str_empty(n->domain)) {
        put_esc(b, n->domain);
        ot_sb_puts(b, ".");
    }
    put_esc(b, n->op_type ? n->op_type : "?");
    if (!ot_str_empty(n->name)) {
        ot_sb_puts(b, "\\n");
        put_esc(b, n->name);
    }
    for (size_t a = 0; a < n->n_attrs; a++) {
        const otter_attr *at = &n->attrs[a];
        if (at->g) {
            ot_sb_puts(b, "\\n");
            put_esc(b, at->name);
            ot_sb_printf(b, ": subgraph of %zu nodes", at->g->n_nodes);
        }
        if (at->n_graphs) {
            ot_sb_puts(b, "\\n");
            put_esc(b, at->name);
            ot_sb_printf(b, ": %zu subgraphs", at->n_graphs);
        }
    }
    if (c->o->hide_initializers) {
        for (size_t k = 0; k < n->n_inputs; k++) {
            intptr_t v;
            if (!ot_strmap_get(&c->src, n->inputs[k], &v) || SRC_KIND(v) != SRC_INIT) continue;
            ot_sb_puts(b, "\\n");
            put_esc(b, n->inputs[k]);
            put_init_type(b, c->g->initializers[SRC_INDEX(v)]);
        }
    }
    ot_sb_puts(b, "\"];\n");
}

otter_status otter_graph_to_dot(const otter_graph *g, const otter_dot_options *opts, char **out) {
    if (!g || !out) return ot_error(OTTER_ERR_ARGUMENT, "otter_graph_to_dot: graph or out is NULL");
    otter_dot_options o = {0};
    if (opts) o = *opts;
    const char *rankdir = o.rankdir ? o.rankdir : "TB";
    if (strcmp(rankdir, "TB") != 0 && strcmp(rankdir, "LR") != 0 && strcmp(rankdir, "BT") != 0 &&
        strcmp(rankdir, "RL") != 0)
        return ot_error(OTTER_ERR_ARGUMENT, "otter_graph_to_dot: rankdir '%s' is not TB, LR, BT or RL", rankdir);
    ot_sb b = {0};
    struct dot_ctx c = {&b, g, &o, {0}, {0}, 0};
    otter_status s = ot_strmap_reserve(&c.src, g->n_inputs + g->n_initializers + g->n_nodes);
    if (s == OTTER_OK) s = ot_strmap_reserve(&c.outer, 8);
    /* Sources: initializers, then inputs (an input with a default is drawn as an input), then nodes. */
    for (size_t i = 0; i < g->n_initializers && s == OTTER_OK; i++)
        if (g->initializers[i]->name) s = ot_strmap_put(&c.src, g->initializers[i]->name, SRC(SRC_INIT, i));
    for (size_t i = 0; i < g->n_inputs && s == OTTER_OK; i++)
        if (g->inputs[i].name) s = ot_strmap_put(&c.src, g->inputs[i].name, SRC(SRC_INPUT, i));
    for (size_t i = 0; i < g->n_nodes && s == OTTER_OK; i++)
        for (size_t j = 0; j < g->nodes[i]->n_outputs && s == OTTER_OK; j++)
            if (!ot_str_empty(g->nodes[i]->outputs[j]))
                s = ot_strmap_put(&c.src, g->nodes[i]->outputs[j], SRC(SRC_NODE, i));

    ot_sb_puts(&b, "digraph \"");
    put_esc(&b, g->name ? g->name : "graph");
    ot_sb_printf(&b, "\" {\n  rankdir=%s;\n", rankdir);
    ot_sb_puts(&b, "  node [fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=9];\n");
    for (size_t i = 0; i < g->n_inputs; i++) {
        ot_sb_puts(&b, "  ");
        put_src_id(&b, SRC(SRC_INPUT, i), g);
        ot_sb_puts(&b, " [shape=ellipse, style=filled, fillcolor=\"#cfe2ff\", label=\"");
        put_tensor_label(&b, g->inputs[i].name, g->inputs[i].has_type ? &g->inputs[i].type : NULL);
        ot_sb_puts(&b, "\"];\n");
    }
    if (!o.hide_initializers)
        for (size_t i = 0; i < g->n_initializers; i++) {
            intptr_t v;
            if (!g->initializers[i]->name || !ot_strmap_get(&c.src, g->initializers[i]->name, &v) ||
                SRC_KIND(v) != SRC_INIT)
                continue;
            ot_sb_puts(&b, "  ");
            put_src_id(&b, v, g);
            ot_sb_puts(&b, " [shape=note, style=filled, fillcolor=\"#eeeeee\", fontsize=8, label=\"");
            put_esc(&b, g->initializers[i]->name);
            put_init_type(&b, g->initializers[i]);
            ot_sb_puts(&b, "\"];\n");
        }
    for (size_t i = 0; i < g->n_nodes; i++) draw_node(&c, i);
    for (size_t i = 0; i < g->n_nodes && s == OTTER_OK; i++) {
        c.reader = i;
        s = ot_node_reads(g->nodes[i], draw_edge, &c);
    }
    for (size_t i = 0; i < g->n_outputs && s == OTTER_OK; i++) {
        const otter_value *v = &g->outputs[i];
        ot_sb_printf(&b, "  \"out:");
        put_esc(&b, v->name);
        ot_sb_puts(&b, "\" [shape=ellipse, style=filled, fillcolor=\"#d1e7dd\", label=\"");
        put_tensor_label(&b, v->name, v->has_type ? &v->type : NULL);
        ot_sb_puts(&b, "\"];\n");
        intptr_t src;
        if (v->name && ot_strmap_get(&c.src, v->name, &src)) {
            ot_sb_puts(&b, "  ");
            put_src_id(&b, src, g);
            ot_sb_puts(&b, " -> \"out:");
            put_esc(&b, v->name);
            ot_sb_puts(&b, "\";\n");
        }
    }
    ot_sb_puts(&b, "}\n");
    ot_strmap_free(&c.src);
    ot_strmap_free(&c.outer);
    if (s != OTTER_OK) {
        ot_free(b.data);
        return s;
    }
    return ot_sb_finish(&b, out);
}
