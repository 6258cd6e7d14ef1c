/* otter: training artifacts in ONNX Runtime's format.
 *
 * From a forward-only model, otter_artifacts_generate writes into a folder (each name after an
 * optional prefix): training_model.onnx (forward + loss + gradients + gradient accumulation),
 * eval_model.onnx (forward + loss), optimizer_model.onnx (one AdamW or SGD node over tensor
 * sequences) and checkpoint (every parameter, ORT's flatbuffer), exactly as ORT's Python tool
 * lays them out (../shared/specs/ort-training-format.md), so ORT's training runtime and otter
 * train them alike. Everything is built and checked in memory first; files are written
 * atomically and only when all four are good. */
#ifndef OTTER_ARTIFACTS_H
#define OTTER_ARTIFACTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "otter/blocks.h"
#include "otter/ir.h"
#include "otter/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum otter_loss_kind {
    OTTER_LOSS_NONE = 0, /* the model's first output already is the loss (or a custom_loss builds it) */
    OTTER_LOSS_MSE,
    OTTER_LOSS_CROSS_ENTROPY,
    OTTER_LOSS_BCE_WITH_LOGITS,
    OTTER_LOSS_L1
} otter_loss_kind;
/* "MSELoss", "CrossEntropyLoss", "BCEWithLogitsLoss", "L1Loss" (and "none"); OTTER_LOSS_NONE + false when unknown. */
OTTER_API bool otter_loss_from_name(const char *name, otter_loss_kind *out);

typedef enum otter_optimizer_kind { OTTER_OPTIM_ADAMW = 0, OTTER_OPTIM_SGD, OTTER_OPTIM_NONE } otter_optimizer_kind;

/* A custom loss: build it from the model outputs (`outputs`, the loss inputs) with blocks and return
 * the name of the scalar loss tensor (NULL on failure). */
typedef const char *(*otter_custom_loss_fn)(otter_builder *b, size_t n_outputs, const char *const *outputs, void *user);

typedef struct otter_artifacts_options {
    /* Initializers that get gradients; NULL/0: every float initializer not frozen. */
    size_t n_requires_grad;
    const char *const *requires_grad;
    /* Initializers kept as (untrained) parameters. BatchNormalization running statistics are added
     * when requires_grad is not given. */
    size_t n_frozen;
    const char *const *frozen;
    otter_loss_kind loss;
    otter_reduction reduction;
    /* CrossEntropyLoss: class weights (NULL: none) and ignore_index (when has_ignore_index). */
    const float *ce_weight;
    size_t n_ce_weight;
    bool has_ignore_index;
    int64_t ignore_index;
    /* BCEWithLogitsLoss: positive-class weights (NULL: none). */
    const float *pos_weight;
    size_t n_pos_weight;
    otter_custom_loss_fn custom_loss; /* with loss OTTER_LOSS_NONE */
    void *custom_loss_user;
    /* Outputs that feed the loss (NULL/0: all the model's outputs). */
    size_t n_loss_inputs;
    const char *const *loss_inputs;
    /* Extra graph outputs after the loss, in the training and eval models. */
    size_t n_additional_outputs;
    const char *const *additional_outputs;
    otter_optimizer_kind optimizer;
    /* AdamW hyperparameters (ONNX Runtime's AdamWOptimizer attributes alpha = beta1, beta2, epsilon, weight_decay,
     * correct_bias, adam_mode), used when adamw_set; otherwise otter_artifacts_adamw_defaults'. */
    bool adamw_set;
    float beta1, beta2, epsilon, weight_decay;
    int64_t correct_bias, adam_mode;
    /* Training-mode BatchNormalization's running variance: false (ONNX Runtime's CPU kernel) mixes in the
     * biased batch variance, sum (x - mean)^2 / n; true, PyTorch's, the unbiased one, / (n - 1), through the
     * attribute otter_unbiased_running_var = 1 on the training model's BatchNormInternal nodes, which otter
     * reads and ONNX Runtime, not knowing it, refuses. n: the values per channel in the batch. */
    bool bn_unbiased_running_var;
    const char *prefix;      /* file name prefix (NULL: none) */
    bool nominal_checkpoint; /* also write nominal_checkpoint (shapes only) */
} otter_artifacts_options;

/* The eval model's metadata_props record the forward model's outputs, which the loss replaced as the
 * graph's outputs: "otter.forward_output.0" = the first output's name, and so on (otter_training_export
 * keeps them by default). */
#define OTTER_FORWARD_OUTPUT_KEY "otter.forward_output."

/* What was made (optional). Names point into storage that lives until otter_artifacts_free. */
typedef struct otter_artifacts {
    otter_model *training, *eval, *optimizer;
    struct otter_checkpoint *checkpoint;
    struct otter_checkpoint *nominal; /* with nominal_checkpoint: dtypes and dims only */
    size_t n_trainable, n_frozen;
    char **trainable; /* parameter names in graph order */
    char **frozen;
    size_t n_bn_frozen;  /* how many frozen parameters came from BatchNormalization by default */
    char generation[33]; /* this build's id, stamped into every artifact (OTTER_ARTIFACTS_GENERATION_KEY) */
} otter_artifacts;

/* One set of artifacts shares a generation: the models carry it in metadata_props and the checkpoints
 * as a string property under this key (training keeps it in the checkpoints it saves). A folder also
 * holds OTTER_ARTIFACTS_MANIFEST ("otter artifacts <generation> writing|complete"), written before the
 * first file and after the last one. otter_training_session_create_from_dir refuses a folder whose
 * manifest says "writing" (an interrupted write) and a set whose files carry different generations
 * (files of two builds mixed); files without a generation (ONNX Runtime's) are taken as they are. */
#define OTTER_ARTIFACTS_GENERATION_KEY "otter.artifacts"
#define OTTER_ARTIFACTS_MANIFEST       "otter_artifacts.txt"

/* ONNX Runtime's Python tool's AdamW hyperparameters, the default: beta1 0.9, beta2 0.999, epsilon 1e-6,
 * weight_decay 0, correct_bias 1, adam_mode 1 (weight decay applied after the update, as Hugging Face's
 * AdamW). torch.optim.AdamW's defaults differ: epsilon 1e-8, weight_decay 0.01, adam_mode 0 (decay before
 * the update, PyTorch's formula). Sets adamw_set and those six fields. */
OTTER_API void otter_artifacts_adamw_defaults(otter_artifacts_options *o);

/* Build the artifacts in memory. */
OTTER_API otter_status otter_artifacts_build(otter_artifacts *out, const otter_model *m,
                                             const otter_artifacts_options *opts);
/* Write them into dir (created if missing), names after opts->prefix. */
OTTER_API otter_status otter_artifacts_write(const otter_artifacts *a, const char *dir,
                                             const otter_artifacts_options *opts);
OTTER_API void otter_artifacts_free(otter_artifacts *a);

#ifdef __cplusplus
}
#endif
#endif
