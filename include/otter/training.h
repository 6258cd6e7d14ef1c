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
 * or let otter_training_run (below) drive those steps over a dataset, with evaluation, checkpoints, a
 * learning-rate schedule and a progress callback: it is what `otter train` and the federated clients run.
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
#include "otter/data.h"
#include "otter/ir.h"
#include "otter/runtime.h"
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
    /* Memory budget of each of the session's runtimes (train, eval, optimizer), as
     * otter_session_options.max_memory_bytes; 0: the machine's physical memory. */
    size_t max_memory_bytes;
    /* Time every node of the train and eval steps (otter_training_profile); two clock reads a node. */
    bool profile;
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

/* With options.profile: the time spent in each node of the training (OTTER_TRAINING_GRAPH: forward and
 * backward, the optimizer step excluded) or eval model over the steps since create, as
 * otter_session_profile: fills out[0 .. cap) in execution order, returns how many nodes there are (0
 * without options.profile or without that model). The first steps plan and touch memory: take a snapshot
 * after them and subtract it for the steady state, as `otter train --profile` does. */
OTTER_API size_t otter_training_profile(const otter_training_session *s, otter_training_graph g,
                                        otter_node_profile *out, size_t cap);

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
/* Before training: will a save to path work? Lays the checkpoint out as the save would (tensor data in
 * "<path>.data" past OTTER_CHECKPOINT_EXTERNAL_THRESHOLD, counting the momentums the first optimizer step adds)
 * and checks the folder is writable with room for the files. otter_training_run calls it before its first
 * step for its checkpoint paths, so a run doesn't lose an epoch to a save that can't succeed. */
OTTER_API otter_status otter_training_check_checkpoint(otter_training_session *s, const char *path,
                                                       bool include_optimizer_state);

/* ORT's ExportModelForInferencing: the eval model with only the named outputs (n_outputs 0: every eval
 * output but the loss), nodes they don't need pruned, parameter inputs turned back into initializers
 * holding the current values, unused inputs dropped. */
OTTER_API otter_status otter_training_export_model(const otter_training_session *s, size_t n_outputs,
                                                   const char *const *output_names, otter_model **out);
OTTER_API otter_status otter_training_export(const otter_training_session *s, const char *path, size_t n_outputs,
                                             const char *const *output_names);

/* ---- datasets: evaluation and the training loop --------------------------------------------------- */

/* A dataset feeds the model's two user inputs (inputs, then targets): each batch's inputs are reshaped to
 * the model input's per-sample dims (an error names the input when the element counts differ), class
 * labels become one-hot rows when the model's target is float (an error names the label, row and target
 * when a label is out of range). */

typedef struct otter_eval_result {
    int64_t samples;
    double loss; /* mean over the samples (batch losses weighted by batch size) */
    /* Accuracy (argmax of the eval model's first additional output, [n, C], against the labels) when the
     * model has such an output and the targets are labels. */
    bool has_accuracy;
    double accuracy;
} otter_eval_result;

/* The eval model over the whole dataset, in order, batch_size samples a step (0: 256). */
OTTER_API otter_status otter_training_evaluate(otter_training_session *s, const otter_dataset *ds, int64_t batch_size,
                                               otter_eval_result *out);

typedef enum otter_train_event {
    OTTER_TRAIN_BEGIN,     /* before the first batch: the run's plan (position, batches per epoch, total) */
    OTTER_TRAIN_STEP,      /* after each batch (and the optimizer step it completed, if any) */
    OTTER_TRAIN_EPOCH_END, /* after an epoch: its mean loss, the evaluation, the checkpoint saved */
    OTTER_TRAIN_STOPPED    /* the run ended inside an epoch (max_steps or the callback); position saved */
} otter_train_event;

typedef struct otter_train_progress {
    otter_train_event event;
    int64_t epoch;             /* 0-based epoch (BEGIN: where the run starts; EPOCH_END: the one finished) */
    int64_t batch;             /* batches done in this epoch (BEGIN: where the run starts) */
    int64_t batches_per_epoch; /* of the training data (a partial last batch counts) */
    int64_t epochs;            /* epochs the run reaches: ceil(total_steps / batches_per_epoch) */
    int64_t global_step;       /* batches done in total, resumed ones included */
    int64_t total_steps;       /* global_step when the run is complete */
    int64_t samples;           /* STEP: the batch's; EPOCH_END, STOPPED: the epoch's so far; BEGIN: an epoch's */
    int64_t run_samples;       /* samples trained on since this call started */
    double loss;               /* STEP: the batch's loss; EPOCH_END, STOPPED: the epoch's mean (NaN: none) */
    bool has_eval;             /* EPOCH_END with eval_data */
    otter_eval_result eval;
    float lr;                /* the learning rate now */
    int64_t optimizer_steps; /* otter_training_step_count */
    double seconds;          /* since this call started */
    double epoch_seconds;    /* since the epoch (or this call) started */
    const char *checkpoint;  /* EPOCH_END, STOPPED: the file just saved (NULL: none) */
    bool new_best;           /* EPOCH_END: the eval loss is the lowest so far (best_checkpoint saved) */
} otter_train_progress;

/* Called for every event; return false to stop. A stop at STEP inside an epoch finishes the pending
 * optimizer step and saves the position (a STOPPED event follows); at an epoch's last STEP or at EPOCH_END
 * the run ends after that epoch's evaluation and checkpoint. */
typedef bool (*otter_train_callback)(const otter_train_progress *p, void *user);

/* Zero-initialized: the documented defaults. */
typedef struct otter_train_options {
    int64_t batch_size; /* samples per batch (0: 64) */
    int64_t epochs;     /* epochs in total, resumed ones included (0: 1) */
    int64_t max_steps;  /* > 0: run this many batches in total instead (resumed ones included) */
    /* Sum the gradients of grad_accum batches per optimizer step (0: 1); an epoch's leftover batches get
     * their optimizer step at the epoch's end. Each optimizer step is followed by the scheduler step and a
     * lazy gradient reset. */
    int64_t grad_accum;
    bool keep_order; /* false: a new batch order every epoch, from (seed, epoch) alone */
    /* Leave out each epoch's partial last batch. false: it is fed, which a model whose first input has a
     * fixed batch dimension refuses (the run fails before its first step, saying so). */
    bool drop_last;
    uint64_t seed;
    /* Epoch e of this run takes the order of epoch epoch_offset + e (an FL client's round r of E local
     * epochs: (r - 1) * E, so a retried round trains the same). */
    uint64_t epoch_offset;
    const int64_t *indices; /* train on these samples of the dataset only (NULL: all), e.g. a partition */
    int64_t num_indices;
    bool set_lr; /* set the learning rate to lr first (false: keep the session's) */
    float lr;
    /* A schedule over the run's optimizer steps (kind CONSTANT: none). initial_lr 0 means the learning rate
     * (lr or the session's); total_steps 0 for LINEAR / COSINE means the run's optimizer steps, resumed
     * ones included. */
    otter_lr_schedule schedule;
    const otter_dataset *eval_data; /* evaluated after every epoch (NULL: none) */
    int64_t eval_batch_size;        /* 0: 256 */
    /* Checkpoint policy. `checkpoint`: saved atomically (otter_training_save_checkpoint, with the optimizer
     * state) after every save_every_epochs epochs (0: 1) and the last one, when the run stops inside an
     * epoch, and every save_every_steps batches when > 0, with the position as properties: otter.epoch,
     * otter.batch, otter.global_step, otter.seed, otter.batch_size. NULL: no checkpoint and no properties.
     * `best_checkpoint`: saved after each epoch whose eval loss is the lowest so far (needs eval_data). */
    const char *checkpoint;
    int64_t save_every_epochs;
    int64_t save_every_steps;
    const char *best_checkpoint;
    /* Continue from the position properties of the session's checkpoint (see otter_training_get_position):
     * the same trajectory as an uninterrupted run, since the batch order depends on (seed, epoch) only,
     * Dropout masks on the session's seed and the optimizer step, the learning rate on the optimizer step. */
    bool resume;
    otter_train_callback on_progress; /* NULL: none */
    void *user;
} otter_train_options;

typedef struct otter_train_result {
    int64_t start_step;        /* global step the call started at */
    int64_t total_steps;       /* global step at which the run is complete */
    int64_t steps;             /* batches trained by this call */
    int64_t samples;           /* samples trained on by this call */
    double mean_loss;          /* over those samples (NaN when none) */
    int64_t samples_per_epoch; /* of the training data (after `indices`) */
    int64_t epoch, batch;      /* position reached */
    bool stopped;              /* the callback asked to stop */
    double seconds;
} otter_train_result;

/* Whether otter_training_run and otter_training_evaluate feed ds to the model's user inputs array by array,
 * in order, dtypes kept and checked (npy datasets, "npy:A.npy,B.npy,...": int64 token ids stay int64), rather
 * than as inputs and targets (the other kinds, and two npy arrays that read as such when the model's first
 * input is float: converted to float, normalized, class labels one-hot for a float target). */
OTTER_API bool otter_training_feeds_columns(const otter_training_session *s, const otter_dataset *ds);

/* Train on ds following opts (NULL: defaults). The session needs an optimizer model (and an eval model
 * with eval_data). Dropout masks follow otter_training_set_seed. A resumed run that is already complete
 * returns OTTER_OK with steps 0 (no BEGIN event). Errors name the epoch and batch, the input or the file
 * at fault; a non-finite training loss stops the run with OTTER_ERR_INVALID. result may be NULL. */
OTTER_API otter_status otter_training_run(otter_training_session *s, const otter_dataset *ds,
                                          const otter_train_options *opts, otter_train_result *result);

/* The position otter_training_run saves in the checkpoint's properties. */
typedef struct otter_train_position {
    int64_t epoch, batch, global_step; /* the next batch to train: batch `batch` of epoch `epoch` */
    bool has_seed, has_batch_size;
    uint64_t seed;
    int64_t batch_size;
} otter_train_position;
/* OTTER_ERR_NOT_FOUND when the checkpoint has no otter.epoch / otter.batch / otter.global_step. */
OTTER_API otter_status otter_training_get_position(const otter_training_session *s, otter_train_position *out);

#ifdef __cplusplus
}
#endif
#endif
