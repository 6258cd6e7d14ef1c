/* otter clean IN -o OUT: drop unused parts, sort, deduplicate initializers. */
#include <stdio.h>

#include "cli.h"
#include "otter/edit.h"

int cmd_clean(int argc, char **argv) {
    const char *out = NULL;
    const cli_opt opts[] = {{"--output", "-o", "OUT.onnx", "where to write the cleaned model (required)", &out, NULL},
                            {0}};
    const cli_spec spec = {"clean",
                           "MODEL.onnx",
                           "Clean a model's graph: drop nodes no graph output needs, sort nodes topologically\n"
                           "(a cycle is an error naming a node on it), deduplicate equal initializers, drop\n"
                           "unused initializers and value_info.",
                           1,
                           1,
                           opts};
    const char *pos[1];
    size_t n_pos;
    int rc = cli_parse(&spec, argc, argv, pos, &n_pos);
    if (rc != CLI_CONTINUE) return rc;
    if (!out) return cli_usage_error(&spec, "missing --output");
    otter_model *m = NULL;
    if (!cli_load("clean", pos[0], &m)) return CLI_EXIT_INVALID;
    otter_clean_stats st;
    rc = CLI_EXIT_OK;
    if (otter_graph_clean(m->graph, &st) != OTTER_OK)
        rc = cli_fail("clean", pos[0]);
    else if (!cli_save_edited("clean", m, out))
        rc = CLI_EXIT_INVALID;
    else
        printf("%s: removed %zu nodes, %zu initializers (%zu duplicates merged), %zu value_info -> %s\n", pos[0],
               st.nodes_removed, st.initializers_removed + st.initializers_deduplicated, st.initializers_deduplicated,
               st.value_info_removed, out);
    otter_model_free(m);
    return rc;
}
