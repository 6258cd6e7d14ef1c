/* otter export DIR [--checkpoint CKPT] -o model.onnx [--outputs NAMES]: ORT's ExportModelForInferencing. */
#include <stdio.h>

#include "cli.h"
#include "otter/training.h"

int cmd_export(int argc, char **argv) {
    const char *out = NULL, *ckpt = NULL, *outputs = NULL, *prefix = NULL;
    const cli_opt opts[] = {
        {"--output", "-o", "FILE.onnx", "where to write the inference model (required)", &out, NULL},
        {"--checkpoint", NULL, "CKPT", "weights to export (default: DIR/checkpoint)", &ckpt, NULL},
        {"--outputs", NULL, "NAMES",
         "outputs to keep (default: the forward model's, as `otter artifacts` records them; for artifacts "
         "without that record, every eval output but the loss)",
         &outputs, NULL},
        {"--prefix", NULL, "P", "artifact file name prefix", &prefix, NULL},
        {0}};
    const cli_spec spec = {"export",
                           "DIR",
                           "Make an inference model from training artifacts: the eval model with only the chosen\n"
                           "outputs, the nodes they don't need pruned, and the parameters turned back into\n"
                           "initializers holding the checkpoint's values.",
                           1,
                           1,
                           opts};
    const char *pos[1];
    size_t n_pos;
    int rc = cli_parse(&spec, argc, argv, pos, &n_pos);
    if (rc != CLI_CONTINUE) return rc;
    if (!out) return cli_usage_error(&spec, "missing --output");
    size_t n_names = 0;
    char **names = NULL;
    if (outputs) {
        names = cli_split(outputs, &n_names);
        if (!names) return cli_fail("export", "--outputs");
        if (n_names == 0) {
            cli_list_free(names);
            return cli_usage_error(&spec, "--outputs is empty");
        }
    }
    otter_training_session *s = NULL;
    rc = CLI_EXIT_OK;
    if (otter_training_session_create_from_dir(&s, pos[0], prefix, ckpt, &(otter_training_options){.n_threads = 1}) !=
        OTTER_OK)
        rc = cli_fail("export", pos[0]);
    otter_model *m = NULL;
    if (rc == CLI_EXIT_OK && otter_training_export_model(s, n_names, (const char *const *)names, &m) != OTTER_OK)
        rc = cli_fail("export", pos[0]);
    if (rc == CLI_EXIT_OK && !cli_save("export", m, out, NULL)) rc = CLI_EXIT_INVALID;
    if (rc == CLI_EXIT_OK) {
        printf("%s: %zu inputs, %zu outputs (", out, m->graph->n_inputs, m->graph->n_outputs);
        for (size_t i = 0; i < m->graph->n_outputs; i++) printf(i ? ", %s" : "%s", m->graph->outputs[i].name);
        printf("), %zu nodes, %zu initializers\n", m->graph->n_nodes, m->graph->n_initializers);
    }
    otter_model_free(m);
    otter_training_session_free(s);
    cli_list_free(names);
    return rc;
}
