/* otter: on-device training over ONNX Runtime's artifacts (training, eval and optimizer models and a
 * checkpoint, ../shared/specs/ort-training-format.md), with what ORT's training C API offers:
 *
 *     otter_checkpoint *ck;  otter_training_session *ts;
 *     otter_checkpoint_load(&ck, "art/checkpoint");
 *     otter_training_session_create(&ts, ck, "art/training_model.onnx", "art/eval_model.onnx",
 *                                   "art/optimizer_model.onnx", NULL);      // ts owns ck from here on
 *     for (...) {
 *         const otter_tensor *in[] = {x, labels};
 *         otter_tensor *loss = NULL;
 *         otter_training_train_step(ts, 2, NULL, in, 1, &loss);           // forward + backward
 *         otter_training_optimizer_step(ts);
 *         otter_training_lazy_reset_grad(ts);
 *         otter_tensor_free(loss);
 *     }
 *     otter_training_save_checkpoint(ts, "art/checkpoint", true);
 *     otter_training_session_free(ts);
 *
 * Memory layout (llm.c style): the float32 trainable parameters live in one flat slab in the training
 * graph's parameter-input order; the gradient accumulation buffers, the first and the second moments are
 * parallel slabs of the same length. The sessions read the slabs in place (no copy per step): the
 * training graph's InPlaceAccumulatorV2 nodes write gradients straight into the gradient slab, the
 * optimizer step is one loop over the slabs, and copying parameters to or from a contiguous buffer
 * (trainable only) is one memcpy. Frozen parameters sit in a second slab.
 *
 * The checkpoint handed to create belongs to the session on success (on failure it stays the caller's).
 * Its tensors are brought up to date from the slabs by otter_training_sync_checkpoint and by the save and
 * export calls.
 *
 * Semantics follow ORT: training-graph inputs are classified by name (a checkpoint parameter,
 * `lazy_reset_grad`, `<param>_grad.accumulation.buffer`, anything else a user input); the first train
 * step and the first after otter_training_lazy_reset_grad overwrite the gradient buffers, later ones add
 * to them; the optimizer step feeds step = state.step + 1 and then increments the state's step; the
 * learning rate starts at 0.001 and is not read from the checkpoint. Errors name the model, input,
 * parameter or file at fault; artifacts that don't belong together (an eval model or a checkpoint from
 * another model) are refused at create. */
#ifndef OTTER_TRAINING_H
#define OTTER_TRAINING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "otter/checkpoint.h"
#include "otter/ir.h"
#include "otter/status.h"
#include "otter/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct otter_training_session otter_training_session;

/* Zero-initialized (or NULL): the defaults. */
typedef struct otter_training_options {
    int n_threads; /* threads for the kernels (0: the available cores) */
    /* Seed for Dropout masks: each Dropout node in each train step gets its own stream derived from the
     * seed, the optimizer step and the train steps since it, so a run resumed from a checkpoint draws the
     * same masks. Without it Dropout draws from an unseeded stream. */
    bool seed_set;
    uint64_t seed;
} otter_training_options;

/* ---- create ------------------------------------------------------------------------------------ */

/* From model files. eval_model and optimizer_model may be NULL (no eval / optimizer step then). */
OTTER_API otter_status otter_training_session_create(otter_training_session **out, otter_checkpoint *ckpt,
                                                     const char *training_model, const char *eval_model,
                                                     const char *optimizer_model, const otter_training_options *opts);
/* From model bytes (copied from, not kept). eval / optimizer: NULL data for none. */
OTTER_API otter_status otter_training_session_create_from_memory(otter_training_session **out, otter_checkpoint *ckpt,
                                                                 const void *training, size_t training_size,
                                                                 const void *eval, size_t eval_size,
                                                                 const void *optimizer, size_t optimizer_size,
                                                                 const otter_training_options *opts);
/* From models in memory; on success the session owns them (and ckpt), on failure they stay the caller's. */
OTTER_API otter_status otter_training_session_create_from_models(otter_training_session **out, otter_checkpoint *ckpt,
                                                                 otter_model *training, otter_model *eval,
                                                                 otter_model *optimizer,
                                                                 const otter_training_options *opts);
/* From an artifacts folder: <prefix>training_model.onnx (required), <prefix>eval_model.onnx and
 * <prefix>optimizer_model.onnx (when present) and the checkpoint file `checkpoint` (NULL:
 * <dir>/<prefix>checkpoint). prefix may be NULL. */
OTTER_API otter_status otter_training_session_create_from_dir(otter_training_session **out, const char *dir,
                                                              const char *prefix, const char *checkpoint,
                                                              const otter_training_options *opts);
OTTER_API void otter_training_session_free(otter_training_session *s);

OTTER_API bool otter_training_has_eval(const otter_training_session *s);
OTTER_API bool otter_training_has_optimizer(const otter_training_session *s);

/* ---- user inputs and outputs ------------------------------------------------------------------- */

typedef enum otter_training_graph { OTTER_TRAINING_GRAPH = 0, OTTER_EVAL_GRAPH = 1 } otter_training_graph;

/* User inputs (model inputs and loss targets, without parameters, gradient buffers and the reset flag)
 * and user outputs (the loss, then the additional outputs) of the training or eval model, in graph
 * order. Names and types point into the model (NULL when i is out of range). */
OTTER_API size_t otter_training_input_count(const otter_training_session *s, otter_training_graph g);
OTTER_API const char *otter_training_input_name(const otter_training_session *s, otter_training_graph g, size_t i);
OTTER_API const otter_type *otter_training_input_type(const otter_training_session *s, otter_training_graph g,
                                                      size_t i);
OTTER_API size_t otter_training_output_count(const otter_training_session *s, otter_training_graph g);
OTTER_API const char *otter_training_output_name(const otter_training_session *s, otter_training_graph g, size_t i);

/* ---- steps ------------------------------------------------------------------------------------- */

/* Forward + backward on one batch. Inputs: input_names NULL binds inputs[i] to the i-th user input; else
 * by name. Outputs: the first n_outputs user outputs (loss first); NULL entries receive new tensors the
 * caller frees, non-NULL ones are filled in place. Gradients go to the accumulation buffers. */
OTTER_API otter_status otter_training_train_step(otter_training_session *s, size_t n_inputs,
                                                 const char *const *input_names, const otter_tensor *const *inputs,
                                                 size_t n_outputs, otter_tensor **outputs);
/* The next train step overwrites the gradient buffers instead of adding to them. */
OTTER_API otter_status otter_training_lazy_reset_grad(otter_training_session *s);
/* Forward + loss with the eval model and the current parameters (same conventions). */
OTTER_API otter_status otter_training_eval_step(otter_training_session *s, size_t n_inputs,
                                                const char *const *input_names, const otter_tensor *const *inputs,
                                                size_t n_outputs, otter_tensor **outputs);
/* One update of every trainable parameter from its accumulated gradient, by the optimizer model's node
 * (com.microsoft AdamWOptimizer with its attributes, or SGDOptimizerV2; InplaceClipGradNorm before it
 * when present), with step = state.step + 1. Momentums are created (zero) at the first step and kept in
 * the checkpoint state as momentum0 / momentum1 of group0. */
OTTER_API otter_status otter_training_optimizer_step(otter_training_session *s);
/* The optimizer state's step (updates done so far, restored from the checkpoint's group0). */
OTTER_API int64_t otter_training_step_count(const otter_training_session *s);
/* Dropout seed (see otter_training_options). */
OTTER_API void otter_training_set_seed(otter_training_session *s, uint64_t seed);

/* ---- learning rate ----------------------------------------------------------------------------- */

OTTER_API float otter_training_get_lr(const otter_training_session *s);
OTTER_API otter_status otter_training_set_lr(otter_training_session *s, float lr); /* lr >= 0, finite */

typedef enum otter_lr_schedule_kind {
    OTTER_LR_CONSTANT = 0, /* no scheduler */
    /* ORT's LinearLRScheduler: factor t/warmup during warm-up, then (total - t)/(total - warmup), >= 0 */
    OTTER_LR_LINEAR,
    /* linear warm-up, then min_lr + (initial - min_lr) * (1 + cos(pi * (t - warmup)/(total - warmup)))/2,
     * min_lr after total */
    OTTER_LR_COSINE,
    /* linear warm-up, then initial * gamma^floor((t - warmup)/step_size) */
    OTTER_LR_STEP
} otter_lr_schedule_kind;

typedef struct otter_lr_schedule {
    otter_lr_schedule_kind kind;
    float initial_lr;
    int64_t warmup_steps, total_steps; /* LINEAR, COSINE: total_steps > 0 (and >= warmup_steps) */
    float min_lr;                      /* COSINE */
    int64_t step_size;                 /* STEP (> 0) */
    float gamma;                       /* STEP */
} otter_lr_schedule;

/* Register a scheduler (like RegisterLinearLRScheduler): the learning rate becomes the schedule's value at
 * the current optimizer step t = otter_training_step_count(s); each otter_training_scheduler_step sets it
 * again from t (call it after each optimizer step). A CONSTANT schedule removes the scheduler. */
OTTER_API otter_status otter_training_set_schedule(otter_training_session *s, const otter_lr_schedule *sched);
OTTER_API otter_status otter_training_scheduler_step(otter_training_session *s);
/* The schedule's learning rate at optimizer step t (pure; for plotting and checks). */
OTTER_API float otter_lr_schedule_at(const otter_lr_schedule *sched, int64_t t);

/* ---- parameters -------------------------------------------------------------------------------- */

/* Elements in the contiguous buffer (ORT's GetParametersSize): float32 parameters in the training graph's
 * parameter-input order, the frozen ones included unless trainable_only. */
OTTER_API size_t otter_training_params_size(const otter_training_session *s, bool trainable_only);
/* n must equal otter_training_params_size(s, trainable_only). Copying into the parameters from a buffer
 * with trainable_only = false sets every parameter of a nominal checkpoint. */
OTTER_API otter_status otter_training_copy_params_to_buffer(const otter_training_session *s, float *buf, size_t n,
                                                            bool trainable_only);
OTTER_API otter_status otter_training_copy_buffer_to_params(otter_training_session *s, const float *buf, size_t n,
                                                            bool trainable_only);
/* The trainable slab itself (n floats, buffer order), for in-place aggregation such as FedAvg. Writing it
 * changes the parameters; it stays valid for the session's life. */
OTTER_API float *otter_training_trainable_slab(otter_training_session *s, size_t *n);
/* The gradient slab (parallel to the trainable slab). */
OTTER_API const float *otter_training_grad_slab(const otter_training_session *s, size_t *n);

/* Parameters (all, graph order) one by one. */
OTTER_API size_t otter_training_param_count(const otter_training_session *s);
OTTER_API const char *otter_training_param_name(const otter_training_session *s, size_t i);
typedef struct otter_param_info {
    otter_dtype dtype;
    int rank;
    int64_t dims[OTTER_MAX_RANK];
    bool trainable;
    /* Element offsets in the contiguous buffers (trainable_only false / true); SIZE_MAX when the parameter
     * is not in that buffer (not float32, or frozen for the trainable one). */
    size_t offset_all, offset_trainable;
} otter_param_info;
/* OTTER_ERR_NOT_FOUND naming the parameter when absent. */
OTTER_API otter_status otter_training_describe_param(const otter_training_session *s, const char *name,
                                                     otter_param_info *info);
/* A copy of the parameter's current value (caller frees). */
OTTER_API otter_status otter_training_get_param(const otter_training_session *s, const char *name, otter_tensor **out);
/* Set a parameter's value (same dtype and dims). */
OTTER_API otter_status otter_training_set_param(otter_training_session *s, const char *name, const otter_tensor *value);

/* ---- properties, checkpoint, export -------------------------------------------------------------- */

OTTER_API otter_status otter_training_set_property_int(otter_training_session *s, const char *name, int64_t v);
OTTER_API otter_status otter_training_set_property_float(otter_training_session *s, const char *name, float v);
OTTER_API otter_status otter_training_set_property_string(otter_training_session *s, const char *name, const char *v);
/* OTTER_ERR_NOT_FOUND when absent. */
OTTER_API otter_status otter_training_get_property(const otter_training_session *s, const char *name,
                                                   const otter_property **out);

/* Bring the owned checkpoint up to date (parameters; group0 step, initial learning rate and momentums once
 * they exist) and return it. Valid until the next call on the session. */
OTTER_API otter_status otter_training_sync_checkpoint(otter_training_session *s, const otter_checkpoint **out);
/* Save the state atomically (the previous file stays intact on failure). include_optimizer_state false
 * leaves the optimizer groups out of the file. */
OTTER_API otter_status otter_training_save_checkpoint(otter_training_session *s, const char *path,
                                                      bool include_optimizer_state);

/* ORT's ExportModelForInferencing: the eval model with only the named outputs (n_outputs 0: every eval
 * output but the loss), nodes they don't need pruned, parameter inputs turned back into initializers
 * holding the current values, unused inputs dropped. */
OTTER_API otter_status otter_training_export_model(const otter_training_session *s, size_t n_outputs,
                                                   const char *const *output_names, otter_model **out);
OTTER_API otter_status otter_training_export(const otter_training_session *s, const char *path, size_t n_outputs,
                                             const char *const *output_names);

#ifdef __cplusplus
}
#endif
#endif
