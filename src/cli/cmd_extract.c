/* otter extract IN --inputs a,b --outputs y -o OUT: the sub-model between given tensors. */
#include <stdio.h>

#include "cli.h"
#include "otter/edit.h"
#include "otter/infer.h"

int cmd_extract(int argc, char **argv) {
    const char *out = NULL, *inputs = NULL, *outputs = NULL;
    const cli_opt opts[] = {
        {"--inputs", "-i", "NAME[,...]", "tensors that become the inputs (default: none)", &inputs, NULL},
        {"--outputs", "-O", "NAME[,...]", "tensors that become the outputs (required)", &outputs, NULL},
        {"--output", "-o", "OUT.onnx", "where to write the extracted model (required)", &out, NULL},
        {0}};
    const cli_spec spec = {"extract",
                           "MODEL.onnx",
                           "Extract the sub-model computing the given outputs from the given inputs (like\n"
                           "onnx.utils.extract_model): the nodes between them and the initializers they read. An\n"
                           "output that needs a graph input not listed is an error naming both.",
                           1,
                           1,
                           opts};
    const char *pos[1];
    size_t n_pos;
    int rc = cli_parse(&spec, argc, argv, pos, &n_pos);
    if (rc != CLI_CONTINUE) return rc;
    if (!out) return cli_usage_error(&spec, "missing --output");
    if (!outputs) return cli_usage_error(&spec, "missing --outputs");
    size_t n_in = 0, n_out = 0;
    char **ins = cli_split(inputs ? inputs : "", &n_in), **outs = cli_split(outputs, &n_out);
    if (!ins || !outs) {
        cli_list_free(ins);
        cli_list_free(outs);
        fprintf(stderr, "otter extract: out of memory\n");
        return CLI_EXIT_INVALID;
    }
    if (n_out == 0) {
        cli_list_free(ins);
        cli_list_free(outs);
        return cli_usage_error(&spec, "--outputs lists no names");
    }
    otter_model *m = NULL, *sub = NULL;
    rc = CLI_EXIT_OK;
    if (!cli_load("extract", pos[0], &m))
        rc = CLI_EXIT_INVALID;
    else if (otter_model_infer_shapes(m, NULL) != OTTER_OK) /* so the new inputs and outputs get their types */
        rc = cli_fail("extract", pos[0]);
    else if (otter_model_extract(&sub, m, n_in, (const char *const *)ins, n_out, (const char *const *)outs) != OTTER_OK)
        rc = cli_fail("extract", pos[0]);
    else if (!cli_save_edited("extract", sub, out))
        rc = CLI_EXIT_INVALID;
    else
        printf("%s -> %s (%zu of %zu nodes)\n", pos[0], out, sub->graph->n_nodes, m->graph->n_nodes);
    otter_model_free(sub);
    otter_model_free(m);
    cli_list_free(ins);
    cli_list_free(outs);
    return rc;
}
