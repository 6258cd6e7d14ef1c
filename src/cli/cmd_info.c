/* otter info MODEL: a summary of a model. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "otter/print.h"

typedef struct op_count {
    char label[160]; /* "Gemm" or "domain.Op" */
    size_t count;
} op_count;

typedef struct counts {
    op_count *ops;
    size_t n_ops, cap_ops;
    size_t n_nodes, n_sub_nodes;
} counts;

static bool count_graph(counts *c, const otter_graph *g, bool sub) {
    for (size_t i = 0; i < g->n_nodes; i++) {
        const otter_node *n = g->nodes[i];
        char label[160];
        snprintf(label, sizeof label, "%s%s%s", n->domain && n->domain[0] ? n->domain : "",
                 n->domain && n->domain[0] ? "." : "", n->op_type ? n->op_type : "?");
        size_t k = 0;
        while (k < c->n_ops && strcmp(c->ops[k].label, label) != 0) k++;
        if (k == c->n_ops) {
            if (c->n_ops == c->cap_ops) {
                size_t cap = c->cap_ops ? 2 * c->cap_ops : 16;
                op_count *p = realloc(c->ops, cap * sizeof *p);
                if (!p) return false;
                c->ops = p;
                c->cap_ops = cap;
            }
            memcpy(c->ops[c->n_ops].label, label, sizeof label);
            c->ops[c->n_ops++].count = 0;
        }
        c->ops[k].count++;
        if (sub)
            c->n_sub_nodes++;
        else
            c->n_nodes++;
        for (size_t a = 0; a < n->n_attrs; a++) {
            if (n->attrs[a].g && !count_graph(c, n->attrs[a].g, true)) return false;
            for (size_t j = 0; j < n->attrs[a].n_graphs; j++)
                if (n->attrs[a].graphs[j] && !count_graph(c, n->attrs[a].graphs[j], true)) return false;
        }
    }
    return true;
}

static int cmp_count(const void *a, const void *b) {
    const op_count *x = a, *y = b;
    if (x->count != y->count) return x->count < y->count ? 1 : -1;
    return strcmp(x->label, y->label);
}

static void print_values(const char *what, const otter_value *vs, size_t n) {
    printf("%s (%zu):\n", what, n);
    for (size_t i = 0; i < n; i++) {
        char *t = NULL;
        otter_type_to_text(vs[i].has_type ? &vs[i].type : NULL, &t);
        printf("  %s: %s\n", vs[i].name ? vs[i].name : "", t ? t : "?");
        otter_free(t);
    }
}

int cmd_info(int argc, char **argv) {
    static const cli_opt opts[] = {{0}};
    const cli_spec spec = {"info",
                           "MODEL.onnx",
                           "Summarize a model: ir_version, opset imports, producer, graph inputs and outputs with\n"
                           "their types, node counts by operator, initializers and parameter count and bytes.",
                           1,
                           1,
                           opts};
    const char *pos[1];
    size_t n_pos;
    int rc = cli_parse(&spec, argc, argv, pos, &n_pos);
    if (rc != CLI_CONTINUE) return rc;
    otter_model *m = NULL;
    if (!cli_load("info", pos[0], &m)) return CLI_EXIT_INVALID;
    const otter_graph *g = m->graph;

    printf("model: %s\n", pos[0]);
    if (m->has_ir_version) printf("ir_version: %" PRId64 "\n", m->ir_version);
    printf("opsets:");
    for (size_t i = 0; i < m->n_opsets; i++)
        printf(" %s %" PRId64 "%s", m->opsets[i].domain && m->opsets[i].domain[0] ? m->opsets[i].domain : "ai.onnx",
               m->opsets[i].version, i + 1 < m->n_opsets ? "," : "");
    printf("\n");
    if (m->producer_name || m->producer_version)
        printf("producer: %s %s\n", m->producer_name ? m->producer_name : "",
               m->producer_version ? m->producer_version : "");
    printf("graph: %s\n", g->name ? g->name : "");
    print_values("inputs", g->inputs, g->n_inputs);
    print_values("outputs", g->outputs, g->n_outputs);

    counts c = {0};
    if (!count_graph(&c, g, false)) {
        free(c.ops);
        otter_model_free(m);
        fprintf(stderr, "otter info: out of memory\n");
        return CLI_EXIT_INVALID;
    }
    qsort(c.ops, c.n_ops, sizeof *c.ops, cmp_count);
    printf("nodes: %zu", c.n_nodes);
    if (c.n_sub_nodes) printf(" (and %zu in subgraphs)", c.n_sub_nodes);
    printf("\n");
    for (size_t i = 0; i < c.n_ops; i++) printf("  %-24s %zu\n", c.ops[i].label, c.ops[i].count);
    free(c.ops);

    int64_t params = 0;
    size_t bytes = 0;
    for (size_t i = 0; i < g->n_initializers; i++) {
        params += otter_tensor_numel(g->initializers[i]);
        bytes += otter_tensor_nbytes(g->initializers[i]);
    }
    printf("initializers: %zu\n", g->n_initializers);
    printf("parameters: %" PRId64 " (%zu bytes)\n", params, bytes);
    otter_model_free(m);
    return CLI_EXIT_OK;
}
