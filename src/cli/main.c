/* `otter <verb> ...`: the verb table, global --help and --version. Each verb lives in its own
 * file (src/cli/cmd_<verb>.c) over the public API. Exit status: 0 success, 1 invalid input,
 * 2 usage error. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

typedef struct verb {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} verb;

static const verb VERBS[] = {
    {"info", cmd_info, "summary: ir_version, opsets, inputs/outputs, node counts, parameters"},
    {"print", cmd_print, "the model as readable text (like onnx.helper.printable_graph)"},
    {"check", cmd_check, "check a model like onnx.checker.check_model(full_check=True)"},
    {"clean", cmd_clean, "drop unused nodes/initializers/value_info, sort, deduplicate constants"},
    {"merge", cmd_merge, "wire outputs of one model to inputs of another (or place side by side)"},
    {"extract", cmd_extract, "the sub-model computing given outputs from given inputs"},
    {"dot", cmd_dot, "Graphviz DOT of the graph, or SVG/PNG through graphviz's dot"},
    {"convert", cmd_convert, "re-save a model; move tensor data to or from external data"},
    {"run", cmd_run, "run a model on .npy/.pb inputs; latency and memory with --repeat"},
    {"models", cmd_models, "build the seeds' MNIST DNN or CIFAR-10 CNN with the block API"},
    {"artifacts", cmd_artifacts, "training/eval/optimizer models and checkpoint in ONNX Runtime's format"},
    {"train", cmd_train, "train ORT-format artifacts on a dataset (progress, per-epoch table, resume, plot)"},
    {"eval", cmd_eval, "loss and accuracy of training artifacts on a dataset"},
    {"export", cmd_export, "inference model from the eval model and a checkpoint's current weights"},
    {"params", cmd_params, "parameter buffer layout: FLAT's shapes.json"},
    {"fl", cmd_fl, "federated learning: simulate (one process), serve (HTTP server), client"},
    {"checkpoint", cmd_checkpoint, "ORT training checkpoint: info, dump to .npy + manifest.json, convert"},
    {"ops", cmd_ops, "the supported operators: kernel, shape inference, gradient rule (--json)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: otter <verb> [options] [arguments]\n"
               "       otter <verb> --help\n"
               "       otter --version\n\n"
               "on-device training of ONNX models.\n\nverbs:\n");
    for (size_t i = 0; i < sizeof VERBS / sizeof VERBS[0]; i++)
        fprintf(f, "  %-9s %s\n", VERBS[i].name, VERBS[i].summary);
    fprintf(f, "\nexit status: 0 success, 1 invalid input, 2 usage error\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    const char *v = argv[1];
    if (strcmp(v, "-h") == 0 || strcmp(v, "--help") == 0) {
        usage(stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(v, "--version") == 0 || strcmp(v, "-V") == 0) {
        printf("otter %s\n", OTTER_VERSION);
        return CLI_EXIT_OK;
    }
    if (strcmp(v, "help") == 0) {
        if (argc < 3) {
            usage(stdout);
            return CLI_EXIT_OK;
        }
        char *args[] = {argv[2], "--help", NULL};
        for (size_t i = 0; i < sizeof VERBS / sizeof VERBS[0]; i++)
            if (strcmp(VERBS[i].name, argv[2]) == 0) return VERBS[i].fn(2, args);
        fprintf(stderr, "otter: unknown verb '%s' (see 'otter --help')\n", argv[2]);
        return CLI_EXIT_USAGE;
    }
    for (size_t i = 0; i < sizeof VERBS / sizeof VERBS[0]; i++)
        if (strcmp(VERBS[i].name, v) == 0) return VERBS[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "otter: unknown verb '%s' (see 'otter --help')\n", v);
    return CLI_EXIT_USAGE;
}
