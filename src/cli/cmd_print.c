/* otter print MODEL: the model as readable text. */
#include <stdio.h>

#include "cli.h"
#include "otter/print.h"

int cmd_print(int argc, char **argv) {
    bool graph_only = false;
    const cli_opt opts[] = {{"--graph-only", NULL, NULL, "print the graph without the model header", NULL, &graph_only},
                            {0}};
    const cli_spec spec = {"print",
                           "MODEL.onnx",
                           "Print a model as readable text, like onnx.helper.printable_graph: inputs, initializers\n"
                           "with their shapes, one line per node with its attributes, subgraphs nested.",
                           1,
                           1,
                           opts};
    const char *pos[1];
    size_t n_pos;
    int rc = cli_parse(&spec, argc, argv, pos, &n_pos);
    if (rc != CLI_CONTINUE) return rc;
    otter_model *m = NULL;
    if (!cli_load("print", pos[0], &m)) return CLI_EXIT_INVALID;
    char *text = NULL;
    otter_status s = graph_only ? otter_graph_to_text(m->graph, &text) : otter_model_to_text(m, &text);
    otter_model_free(m);
    if (s != OTTER_OK) return cli_fail("print", pos[0]);
    fputs(text, stdout);
    otter_free(text);
    return CLI_EXIT_OK;
}
