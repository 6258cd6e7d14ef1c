/* otter merge A B --wire a_out:b_in[,...] -o OUT: wire one model into another (or --concat). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "otter/edit.h"

/* Split "a:b" at the colon that names an output of A and an input of B (tensor names may hold
 * colons, as PyTorch's "onnx::Gemm_7"); when none does, at the last colon, and the merge reports
 * which name is wrong. Returns false when there is no colon with text on both sides. */
static bool split_wire(char *w, const otter_graph *ga, const otter_graph *gb, otter_wire *out) {
    size_t n = strlen(w), best = 0;
    for (size_t k = 1; k + 1 < n; k++) {
        if (w[k] != ':') continue;
        w[k] = '\0';
        bool fits = otter_graph_find_output(ga, w) >= 0 && otter_graph_find_input(gb, w + k + 1) >= 0;
        w[k] = ':';
        if (fits) {
            best = k;
            break;
        }
        best = k;
    }
    if (best == 0) return false;
    w[best] = '\0';
    out->a_output = w;
    out->b_input = w + best + 1;
    return true;
}

int cmd_merge(int argc, char **argv) {
    const char *out = NULL, *wire = NULL, *prefix_a = NULL, *prefix_b = NULL, *name = NULL;
    bool keep = false, concat = false;
    const cli_opt opts[] = {
        {"--wire", "-w", "A_OUT:B_IN[,...]", "connect output A_OUT of A to input B_IN of B", &wire, NULL},
        {"--prefix-a", NULL, "P", "prefix every name of A with P", &prefix_a, NULL},
        {"--prefix-b", NULL, "P", "prefix every name of B with P", &prefix_b, NULL},
        {"--keep-a-outputs", NULL, NULL, "also keep A's outputs that are not wired", NULL, &keep},
        {"--concat", NULL, NULL, "no wires: put the graphs side by side (all inputs and outputs kept)", NULL, &concat},
        {"--name", NULL, "NAME", "name of the merged graph (default: <A>_<B>)", &name, NULL},
        {"--output", "-o", "OUT.onnx", "where to write the merged model (required)", &out, NULL},
        {0}};
    const cli_spec spec = {
        "merge",
        "A.onnx B.onnx",
        "Merge two models into one (like sclblonnx.merge): each --wire pair feeds an output of A into an\n"
        "input of B. The result's inputs are A's inputs and B's unwired inputs; its outputs are B's\n"
        "outputs (and, with --keep-a-outputs, A's unwired ones). Opset imports take the higher version\n"
        "per domain. Names used by both graphs are an error unless a prefix separates them.\n"
        "With --concat, the graphs are placed side by side instead.",
        2,
        2,
        opts};
    const char *pos[2];
    size_t n_pos;
    int rc = cli_parse(&spec, argc, argv, pos, &n_pos);
    if (rc != CLI_CONTINUE) return rc;
    if (!out) return cli_usage_error(&spec, "missing --output");
    if (concat && (wire || keep || name))
        return cli_usage_error(&spec, "--concat takes no --wire, --keep-a-outputs or --name");
    if (!concat && !wire) return cli_usage_error(&spec, "missing --wire (or --concat)");

    otter_model *a = NULL, *b = NULL, *m = NULL;
    if (!cli_load("merge", pos[0], &a)) return CLI_EXIT_INVALID;
    if (!cli_load("merge", pos[1], &b)) {
        otter_model_free(a);
        return CLI_EXIT_INVALID;
    }
    size_t n_wires = 0;
    char **items = NULL;
    otter_wire *wires = NULL;
    rc = CLI_EXIT_OK;
    if (!concat) {
        items = cli_split(wire, &n_wires);
        wires = calloc(n_wires + 1, sizeof *wires);
        if (!items || !wires) {
            fprintf(stderr, "otter merge: out of memory\n");
            rc = CLI_EXIT_INVALID;
        } else if (n_wires == 0) {
            rc = cli_usage_error(&spec, "--wire lists no pairs");
        }
        for (size_t i = 0; i < n_wires && rc == CLI_EXIT_OK; i++)
            if (!split_wire(items[i], a->graph, b->graph, &wires[i]))
                rc = cli_usage_error(&spec, "wire '%s' is not of the form A_OUT:B_IN", items[i]);
    }
    if (rc == CLI_EXIT_OK) {
        otter_status s;
        if (concat) {
            s = otter_model_concat(&m, a, b, prefix_a, prefix_b);
        } else {
            otter_merge_options o = {
                .prefix_a = prefix_a, .prefix_b = prefix_b, .keep_a_outputs = keep, .graph_name = name};
            s = otter_model_merge(&m, a, b, wires, n_wires, &o);
        }
        if (s != OTTER_OK)
            rc = cli_fail("merge", NULL);
        else if (!cli_save_edited("merge", m, out))
            rc = CLI_EXIT_INVALID;
        else
            printf("%s + %s -> %s (%zu nodes, %zu inputs, %zu outputs)\n", pos[0], pos[1], out, m->graph->n_nodes,
                   m->graph->n_inputs, m->graph->n_outputs);
    }
    cli_list_free(items);
    free(wires);
    otter_model_free(m);
    otter_model_free(a);
    otter_model_free(b);
    return rc;
}
