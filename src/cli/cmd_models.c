/* otter models mnist-dnn|cifar10-cnn -o FILE [--seed S]: the seeds' models, built from blocks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "otter/blocks.h"

int cmd_models(int argc, char **argv) {
    const char *out = NULL, *seed_text = NULL;
    const cli_opt opts[] = {{"--output", "-o", "FILE.onnx", "where to write the model (required)", &out, NULL},
                            {"--seed", NULL, "S", "initialization seed (default 0)", &seed_text, NULL},
                            {0}};
    const cli_spec spec = {"models",
                           "mnist-dnn|cifar10-cnn",
                           "Build one of the seeds' models with the block API, initialized like PyTorch's default\n"
                           "Linear/Conv2d init: mnist-dnn (784-200-200-10) or cifar10-cnn (Conv 3-32-64-128, 3x3,\n"
                           "pad 1, ReLU + MaxPool 2 each, then Linear 2048-512-10).",
                           1,
                           1,
                           opts};
    const char *pos[1];
    size_t n_pos;
    int rc = cli_parse(&spec, argc, argv, pos, &n_pos);
    if (rc != CLI_CONTINUE) return rc;
    if (!out) return cli_usage_error(&spec, "missing --output");
    uint64_t seed = 0;
    if (seed_text) {
        char *end;
        seed = strtoull(seed_text, &end, 10);
        if (!*seed_text || *end) return cli_usage_error(&spec, "--seed '%s' is not a number", seed_text);
    }
    otter_model *m = NULL;
    otter_status s;
    if (strcmp(pos[0], "mnist-dnn") == 0)
        s = otter_model_mnist_dnn(&m, seed);
    else if (strcmp(pos[0], "cifar10-cnn") == 0)
        s = otter_model_cifar10_cnn(&m, seed);
    else
        return cli_usage_error(&spec, "unknown model '%s' (mnist-dnn or cifar10-cnn)", pos[0]);
    if (s != OTTER_OK) return cli_fail("models", pos[0]);
    int64_t params = 0;
    for (size_t i = 0; i < m->graph->n_initializers; i++) params += otter_tensor_numel(m->graph->initializers[i]);
    rc = cli_save("models", m, out, NULL) ? CLI_EXIT_OK : CLI_EXIT_INVALID;
    if (rc == CLI_EXIT_OK)
        printf("%s: %zu nodes, %lld parameters (seed %llu) -> %s\n", pos[0], m->graph->n_nodes, (long long)params,
               (unsigned long long)seed, out);
    otter_model_free(m);
    return rc;
}
