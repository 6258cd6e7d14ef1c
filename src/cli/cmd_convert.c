/* otter convert IN -o OUT [--external-data [--threshold BYTES] [--location FILE] | --inline]. */
#include <stdio.h>

#include "cli.h"

int cmd_convert(int argc, char **argv) {
    const char *out = NULL, *threshold = NULL, *location = NULL;
    bool external = false, inline_all = false;
    const cli_opt opts[] = {
        {"--output", "-o", "OUT.onnx", "where to write the model (required)", &out, NULL},
        {"--external-data", NULL, NULL, "move tensor data to a side file next to OUT", NULL, &external},
        {"--threshold", NULL, "BYTES", "with --external-data: tensors of at least BYTES (default 1024; K/M/G)",
         &threshold, NULL},
        {"--location", NULL, "FILE", "with --external-data: side file name (default OUT's name + .data)", &location,
         NULL},
        {"--inline", NULL, NULL, "bring all tensor data back into the model file", NULL, &inline_all},
        {0}};
    const cli_spec spec = {"convert",
                           "MODEL.onnx",
                           "Re-save a model. With --external-data, tensors of at least --threshold bytes are\n"
                           "written to a side file (ONNX external data); with --inline, every tensor is stored in\n"
                           "the model file. Without either, tensors stay where they were. A side file that exists\n"
                           "(the one OUT reads, when re-saving) is never overwritten: the data goes to\n"
                           "'<name>.<16 hex digits>' and the old file is removed once the new model is in place.",
                           1,
                           1,
                           opts};
    const char *pos[1];
    size_t n_pos;
    int rc = cli_parse(&spec, argc, argv, pos, &n_pos);
    if (rc != CLI_CONTINUE) return rc;
    if (!out) return cli_usage_error(&spec, "missing --output");
    if (external && inline_all) return cli_usage_error(&spec, "--external-data and --inline exclude each other");
    if (!external && (threshold || location))
        return cli_usage_error(&spec, "--threshold and --location need --external-data");
    otter_save_options o = {0};
    if (external) {
        o.external_threshold = 1024;
        if (threshold && (!cli_parse_size(threshold, &o.external_threshold) || o.external_threshold == 0))
            return cli_usage_error(&spec, "--threshold '%s' is not a positive byte count", threshold);
        o.external_file = location;
    }
    o.all_inline = inline_all;
    otter_model *m = NULL;
    if (!cli_load("convert", pos[0], &m)) return CLI_EXIT_INVALID;
    rc = cli_save("convert", m, out, &o) ? CLI_EXIT_OK : CLI_EXIT_INVALID;
    if (rc == CLI_EXIT_OK) printf("%s -> %s\n", pos[0], out);
    otter_model_free(m);
    return rc;
}
