/* otter eval DIR --data SPEC [--checkpoint CKPT] [--batch-size B] [--threads N]: loss and accuracy of the
 * eval model on a dataset (otter_training_evaluate). */
#include <stdio.h>

#include "cli.h"
#include "otter/data.h"
#include "otter/training.h"

int cmd_eval(int argc, char **argv) {
    const char *data = NULL, *ckpt = NULL, *batch_text = NULL, *threads_text = NULL, *prefix = NULL, *norm_t = NULL;
    const cli_opt opts[] = {
        {"--data", NULL, "SPEC", "mnist:DIR, fashion-mnist:DIR, cifar10:DIR, npy:X.npy,Y.npy or csv:FILE", &data, NULL},
        {"--checkpoint", NULL, "CKPT", "checkpoint to evaluate (default: DIR/checkpoint)", &ckpt, NULL},
        {"--batch-size", NULL, "B", "samples per eval step (default 256)", &batch_text, NULL},
        {"--threads", NULL, "N", "threads (default: all cores)", &threads_text, NULL},
        {"--prefix", NULL, "P", "artifact file name prefix", &prefix, NULL},
        {"--normalize", NULL, "N",
         "inputs: scale (x/255), standard (per-channel mean/std), none (default: the checkpoint's otter.normalize, "
         "saved by otter train --normalize; else scale for images)",
         &norm_t, NULL},
        {0}};
    const cli_spec spec = {
        "eval",
        "DIR",
        "Evaluate training artifacts (eval model + checkpoint) on a dataset: mean loss and, when the\n"
        "eval model outputs class scores after the loss, accuracy. The test split is used for\n"
        "mnist/fashion-mnist/cifar10 folders.",
        1,
        1,
        opts};
    const char *pos[1];
    size_t n_pos;
    int rc = cli_parse(&spec, argc, argv, pos, &n_pos);
    if (rc != CLI_CONTINUE) return rc;
    if (!data) return cli_usage_error(&spec, "missing --data");
    otter_data_norm norm = OTTER_NORM_DEFAULT;
    if (norm_t && !cli_parse_norm(norm_t, &norm))
        return cli_usage_error(&spec, "--normalize must be none, scale or standard, not '%s'", norm_t);
    long long batch = 256, threads = 0;
    if (batch_text && !cli_parse_int(batch_text, 1, &batch))
        return cli_usage_error(&spec, "--batch-size '%s' is not a positive number", batch_text);
    if (threads_text && !cli_parse_int(threads_text, 0, &threads))
        return cli_usage_error(&spec, "--threads '%s' is not a number", threads_text);
    otter_training_session *s = NULL;
    if (otter_training_session_create_from_dir(&s, pos[0], prefix, ckpt,
                                               &(otter_training_options){.n_threads = (int)threads}) != OTTER_OK)
        return cli_fail("eval", pos[0]);
    if (!otter_training_has_eval(s)) {
        fprintf(stderr, "otter eval: '%s' has no eval model\n", pos[0]);
        otter_training_session_free(s);
        return CLI_EXIT_INVALID;
    }
    const otter_property *np = NULL;
    if (!norm_t && otter_training_get_property(s, "otter.normalize", &np) == OTTER_OK &&
        np->type == OTTER_PROPERTY_STRING && !cli_parse_norm(np->s, &norm))
        fprintf(stderr, "otter eval: warning: ignoring the checkpoint's otter.normalize '%s'\n", np->s);
    otter_dataset *ds = NULL;
    if (otter_dataset_open(&ds, data, &(otter_dataset_options){.split = OTTER_SPLIT_TEST, .norm = norm}) != OTTER_OK) {
        otter_training_session_free(s);
        return cli_fail("eval", data);
    }
    otter_eval_result r;
    rc = otter_training_evaluate(s, ds, batch, &r) == OTTER_OK ? CLI_EXIT_OK : cli_fail("eval", NULL);
    if (rc == CLI_EXIT_OK) {
        printf("%s: %lld samples, loss %.6f", otter_dataset_description(ds), (long long)r.samples, r.loss);
        if (r.has_accuracy) printf(", accuracy %.2f%%", 100.0 * r.accuracy);
        printf("\n");
    }
    otter_dataset_free(ds);
    otter_training_session_free(s);
    return rc;
}
