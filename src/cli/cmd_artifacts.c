/* otter artifacts MODEL -o DIR: training, eval and optimizer models and the checkpoint, in ONNX
 * Runtime's format. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "otter/artifacts.h"
#include "otter/checkpoint.h"

/* "1.5,2,3" -> floats (caller frees). */
static float *parse_floats(const char *text, size_t *n) {
    char **items = cli_split(text, n);
    if (!items) return NULL;
    float *v = calloc(*n + 1, sizeof *v);
    for (size_t i = 0; v && i < *n; i++) {
        char *end;
        v[i] = strtof(items[i], &end);
        if (*end) {
            free(v);
            v = NULL;
        }
    }
    cli_list_free(items);
    return v;
}

/* --lr-hparams beta1=..,beta2=..,eps=..,weight_decay=..,correct_bias=0|1,adam_mode=0|1 */
static bool parse_hparams(const char *text, otter_artifacts_options *o) {
    size_t n;
    char **items = cli_split(text, &n);
    if (!items) return false;
    otter_artifacts_adamw_defaults(o); /* keys not given keep ONNX Runtime's values */
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        char *eq = strchr(items[i], '=');
        if (!eq) {
            ok = false;
            break;
        }
        *eq = '\0';
        char *end;
        double v = strtod(eq + 1, &end);
        ok = *end == '\0' && eq[1];
        if (!strcmp(items[i], "beta1"))
            o->beta1 = (float)v;
        else if (!strcmp(items[i], "beta2"))
            o->beta2 = (float)v;
        else if (!strcmp(items[i], "eps") || !strcmp(items[i], "epsilon"))
            o->epsilon = (float)v;
        else if (!strcmp(items[i], "weight_decay"))
            o->weight_decay = (float)v;
        else if (!strcmp(items[i], "correct_bias"))
            o->correct_bias = (int64_t)v;
        else if (!strcmp(items[i], "adam_mode"))
            o->adam_mode = (int64_t)v;
        else
            ok = false;
    }
    cli_list_free(items);
    return ok;
}

/* torch.optim.AdamW's defaults as --lr-hparams. */
#define TORCH_ADAMW "beta1=0.9,beta2=0.999,eps=1e-8,weight_decay=0.01,correct_bias=1,adam_mode=0"

/* AdamW's hyperparameters as --lr-hparams takes them. */
static void format_hparams(char *buf, size_t cap, const otter_artifacts_options *o) {
    snprintf(buf, cap, "beta1=%g,beta2=%g,eps=%g,weight_decay=%g,correct_bias=%lld,adam_mode=%lld", (double)o->beta1,
             (double)o->beta2, (double)o->epsilon, (double)o->weight_decay, (long long)o->correct_bias,
             (long long)o->adam_mode);
}

int cmd_artifacts(int argc, char **argv) {
    const char *out = NULL, *req = NULL, *frozen = NULL, *loss = NULL, *reduction = NULL, *optim = NULL;
    const char *hparams = NULL, *prefix = NULL, *additional = NULL, *loss_inputs = NULL, *ignore = NULL;
    const char *ce_weight = NULL, *pos_weight = NULL, *bn_var = NULL;
    bool nominal = false;
    otter_artifacts_options defaults = {0};
    otter_artifacts_adamw_defaults(&defaults);
    char default_hp[160], hp_help[512];
    format_hparams(default_hp, sizeof default_hp, &defaults);
    snprintf(hp_help, sizeof hp_help,
             "AdamW: beta1, beta2, eps, weight_decay, correct_bias, adam_mode; keys not given keep ONNX Runtime's "
             "defaults, %s (adam_mode 1: weight decay after the update, as Hugging Face's AdamW). "
             "torch.optim.AdamW's: %s",
             default_hp, TORCH_ADAMW);
    const cli_opt opts[] = {
        {"--output", "-o", "DIR", "folder for the artifacts (required)", &out, NULL},
        {"--requires-grad", NULL, "NAMES", "initializers to train (default: every float initializer not frozen)", &req,
         NULL},
        {"--frozen", NULL, "NAMES", "initializers kept as parameters without gradients", &frozen, NULL},
        {"--loss", NULL, "KIND", "MSELoss, CrossEntropyLoss (default), BCEWithLogitsLoss, L1Loss, or none", &loss,
         NULL},
        {"--reduction", NULL, "R", "mean (default) or sum", &reduction, NULL},
        {"--ignore-index", NULL, "N", "CrossEntropyLoss: class index to ignore", &ignore, NULL},
        {"--ce-weight", NULL, "W,..", "CrossEntropyLoss: per-class weights", &ce_weight, NULL},
        {"--pos-weight", NULL, "W,..", "BCEWithLogitsLoss: per-class positive weights", &pos_weight, NULL},
        {"--optimizer", NULL, "OPT", "AdamW (default), SGD or none", &optim, NULL},
        {"--lr-hparams", NULL, "K=V,..", hp_help, &hparams, NULL},
        {"--bn-running-var", NULL, "V",
         "biased (default, ONNX Runtime's) or unbiased (PyTorch's; otter reads it, ONNX Runtime refuses it): the "
         "batch variance BatchNormalization's running variance takes",
         &bn_var, NULL},
        {"--prefix", NULL, "P", "file name prefix", &prefix, NULL},
        {"--additional-output", NULL, "NAMES", "extra outputs after the loss (training and eval models)", &additional,
         NULL},
        {"--loss-input", NULL, "NAMES", "outputs that feed the loss (default: all)", &loss_inputs, NULL},
        {"--nominal-checkpoint", NULL, NULL, "also write nominal_checkpoint (shapes only)", NULL, &nominal},
        {0}};
    const cli_spec spec = {"artifacts",
                           "MODEL.onnx",
                           "Make ONNX Runtime training artifacts from a forward model: training_model.onnx,\n"
                           "eval_model.onnx, optimizer_model.onnx and checkpoint (ORT 1.16-1.19 format).",
                           1,
                           1,
                           opts};
    const char *pos[1];
    size_t n_pos;
    int rc = cli_parse(&spec, argc, argv, pos, &n_pos);
    if (rc != CLI_CONTINUE) return rc;
    if (!out) return cli_usage_error(&spec, "missing --output");

    otter_artifacts_options o = {.loss = OTTER_LOSS_CROSS_ENTROPY, .prefix = prefix, .nominal_checkpoint = nominal};
    if (loss && !otter_loss_from_name(loss, &o.loss)) return cli_usage_error(&spec, "unknown loss '%s'", loss);
    if (reduction && strcmp(reduction, "mean") && strcmp(reduction, "sum"))
        return cli_usage_error(&spec, "--reduction must be mean or sum, not '%s'", reduction);
    o.reduction = reduction && !strcmp(reduction, "sum") ? OTTER_REDUCE_SUM : OTTER_REDUCE_MEAN;
    if (optim && !strcmp(optim, "SGD"))
        o.optimizer = OTTER_OPTIM_SGD;
    else if (optim && !strcmp(optim, "none"))
        o.optimizer = OTTER_OPTIM_NONE;
    else if (optim && strcmp(optim, "AdamW"))
        return cli_usage_error(&spec, "unknown optimizer '%s'", optim);
    if (hparams && !parse_hparams(hparams, &o)) return cli_usage_error(&spec, "bad --lr-hparams '%s'", hparams);
    if (bn_var && strcmp(bn_var, "biased") && strcmp(bn_var, "unbiased"))
        return cli_usage_error(&spec, "--bn-running-var must be biased or unbiased, not '%s'", bn_var);
    o.bn_unbiased_running_var = bn_var && !strcmp(bn_var, "unbiased");
    if (ignore) {
        char *end;
        o.ignore_index = strtoll(ignore, &end, 10);
        if (!*ignore || *end) return cli_usage_error(&spec, "--ignore-index '%s' is not a number", ignore);
        o.has_ignore_index = true;
    }
    float *cw = NULL, *pw = NULL;
    if (ce_weight && !(cw = parse_floats(ce_weight, &o.n_ce_weight)))
        return cli_usage_error(&spec, "bad --ce-weight '%s'", ce_weight);
    if (pos_weight && !(pw = parse_floats(pos_weight, &o.n_pos_weight))) {
        free(cw);
        return cli_usage_error(&spec, "bad --pos-weight '%s'", pos_weight);
    }
    o.ce_weight = cw;
    o.pos_weight = pw;
    char **lists[4] = {NULL};
    const char *texts[4] = {req, frozen, additional, loss_inputs};
    size_t counts[4] = {0};
    for (int i = 0; i < 4; i++)
        if (texts[i]) lists[i] = cli_split(texts[i], &counts[i]);
    o.requires_grad = (const char *const *)lists[0], o.n_requires_grad = counts[0];
    o.frozen = (const char *const *)lists[1], o.n_frozen = counts[1];
    o.additional_outputs = (const char *const *)lists[2], o.n_additional_outputs = counts[2];
    o.loss_inputs = (const char *const *)lists[3], o.n_loss_inputs = counts[3];

    otter_model *m = NULL;
    otter_artifacts a;
    rc = CLI_EXIT_INVALID;
    if (!cli_load("artifacts", pos[0], &m)) goto done;
    if (otter_artifacts_build(&a, m, &o) != OTTER_OK) {
        rc = cli_fail("artifacts", pos[0]);
        goto done;
    }
    if (otter_artifacts_write(&a, out, &o) != OTTER_OK) {
        rc = cli_fail("artifacts", out);
    } else {
        int64_t n_params = 0;
        for (size_t i = 0; i < otter_checkpoint_param_count(a.checkpoint, OTTER_PARAM_TRAINABLE); i++)
            n_params += otter_tensor_numel(otter_checkpoint_param_at(a.checkpoint, OTTER_PARAM_TRAINABLE, i));
        printf("%s: %zu trainable parameters (%lld floats), %zu frozen", pos[0], a.n_trainable, (long long)n_params,
               a.n_frozen);
        if (a.n_bn_frozen) printf(" (%zu BatchNormalization running statistics, frozen by default)", a.n_bn_frozen);
        printf("\n  training model: %zu nodes; eval model: %zu nodes; optimizer: %s\n  -> %s/%s{training_model.onnx, "
               "eval_model.onnx, %scheckpoint%s}\n",
               a.training->graph->n_nodes, a.eval->graph->n_nodes,
               o.optimizer == OTTER_OPTIM_SGD    ? "SGD"
               : o.optimizer == OTTER_OPTIM_NONE ? "none"
                                                 : "AdamW",
               out, prefix ? prefix : "", o.optimizer == OTTER_OPTIM_NONE ? "" : "optimizer_model.onnx, ",
               nominal ? ", nominal_checkpoint" : "");
        if (o.optimizer == OTTER_OPTIM_ADAMW) {
            otter_artifacts_options hp = o;
            if (!hp.adamw_set) otter_artifacts_adamw_defaults(&hp);
            char used[160];
            format_hparams(used, sizeof used, &hp);
            printf("  AdamW: %s%s\n", used,
                   strcmp(used, default_hp) == 0
                       ? " (ONNX Runtime's defaults; torch.optim.AdamW's: --lr-hparams " TORCH_ADAMW ")"
                       : "");
        }
        size_t n_bn = 0;
        for (size_t i = 0; i < a.training->graph->n_nodes; i++)
            n_bn += strcmp(a.training->graph->nodes[i]->op_type, "BatchNormInternal") == 0;
        if (n_bn)
            printf("  BatchNormalization (%zu in training mode): running variance from the batch's %s\n", n_bn,
                   o.bn_unbiased_running_var
                       ? "unbiased variance, as PyTorch (otter's attribute; ONNX Runtime refuses these artifacts)"
                       : "biased variance, as ONNX Runtime (PyTorch: --bn-running-var unbiased)");
        rc = CLI_EXIT_OK;
    }
    otter_artifacts_free(&a);
done:
    otter_model_free(m);
    for (int i = 0; i < 4; i++) cli_list_free(lists[i]);
    free(cw);
    free(pw);
    return rc;
}
