/* The WebAssembly module's glue: a few flat functions over the public C API for what JavaScript can't
 * call directly without knowing struct layouts (options structs, otter_tensor fields) or passing 64-bit
 * integers (dims and step counts travel as doubles, exact up to 2^53). Everything else web/otter-api.js
 * calls is the public API itself (src/web/exports.txt lists it). Errors: a NULL result or a status, with
 * the message in otter_last_error(). */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "otter/otter.h"

/* ---- tensors ---- */

otter_tensor *otter_web_tensor_new(int dtype, int rank, const double *dims, const void *data) {
    int64_t d[OTTER_MAX_RANK];
    if (rank < 0 || rank > OTTER_MAX_RANK) {
        ot_error(OTTER_ERR_ARGUMENT, "a tensor of rank %d: otter takes ranks 0 to %d", rank, OTTER_MAX_RANK);
        return NULL;
    }
    for (int i = 0; i < rank; i++) d[i] = (int64_t)dims[i];
    otter_tensor *t = NULL;
    if (otter_tensor_from_data(&t, NULL, (otter_dtype)dtype, rank, d, data) != OTTER_OK) return NULL;
    return t;
}

int otter_web_tensor_dtype(const otter_tensor *t) { return (int)t->dtype; }
int otter_web_tensor_rank(const otter_tensor *t) { return t->rank; }
double otter_web_tensor_dim(const otter_tensor *t, int i) { return (double)t->dims[i]; }
void *otter_web_tensor_data(const otter_tensor *t) { return t->data; }

/* ---- training ---- */

otter_training_session *otter_web_training_create(const void *checkpoint, size_t checkpoint_size, const void *training,
                                                  size_t training_size, const void *eval, size_t eval_size,
                                                  const void *optimizer, size_t optimizer_size) {
    otter_checkpoint *ck = NULL;
    otter_status st = otter_checkpoint_load_from_memory(&ck, checkpoint, checkpoint_size);
    if (st != OTTER_OK) {
        ot_error_context(st, "checkpoint state (%zu bytes): ", checkpoint_size);
        return NULL;
    }
    otter_training_options opts = {.n_threads = 1}; /* the module is single-threaded */
    otter_training_session *s = NULL;
    if (otter_training_session_create_from_memory(&s, ck, training, training_size, eval, eval_size, optimizer,
                                                  optimizer_size, &opts) != OTTER_OK) {
        otter_checkpoint_free(ck); /* still ours on failure */
        return NULL;
    }
    return s;
}

double otter_web_training_step_count(const otter_training_session *s) { return (double)otter_training_step_count(s); }

otter_status otter_web_training_set_schedule(otter_training_session *s, int kind, float initial_lr, double warmup_steps,
                                             double total_steps, float min_lr, double step_size, float gamma) {
    otter_lr_schedule sched = {.kind = (otter_lr_schedule_kind)kind,
                               .initial_lr = initial_lr,
                               .warmup_steps = (int64_t)warmup_steps,
                               .total_steps = (int64_t)total_steps,
                               .min_lr = min_lr,
                               .step_size = (int64_t)step_size,
                               .gamma = gamma};
    return otter_training_set_schedule(s, &sched);
}

/* The state as checkpoint bytes (free with otter_free); NULL on failure. */
void *otter_web_training_save_checkpoint(otter_training_session *s, bool include_optimizer_state, size_t *size) {
    const otter_checkpoint *ck = NULL;
    if (otter_training_sync_checkpoint(s, &ck) != OTTER_OK) return NULL;
    otter_checkpoint_save_options o = {.skip_optimizer_state = !include_optimizer_state};
    void *data = NULL;
    if (otter_checkpoint_save_to_memory(ck, &o, &data, size) != OTTER_OK) return NULL;
    return data;
}

/* The inference model as ONNX bytes (free with otter_free); NULL on failure. */
void *otter_web_training_export(const otter_training_session *s, size_t n_outputs, const char *const *output_names,
                                size_t *size) {
    otter_model *m = NULL;
    if (otter_training_export_model(s, n_outputs, output_names, &m) != OTTER_OK) return NULL;
    void *data = NULL;
    otter_status st = otter_model_save_to_memory(m, &data, size);
    otter_model_free(m);
    return st == OTTER_OK ? data : NULL;
}

/* ---- inference ---- */

otter_session *otter_web_session_create(const void *model, size_t size) {
    otter_session_options opts = {.n_threads = 1};
    otter_session *s = NULL;
    if (otter_session_create_from_memory(&s, model, size, &opts) != OTTER_OK) return NULL;
    return s;
}

/* ---- artifacts ---- */

/* Artifacts from a forward model's bytes. loss: a name otter_loss_from_name knows; optimizer: "AdamW",
 * "SGD" or "none"; the name lists are NULL/0 for the defaults. */
otter_artifacts *otter_web_artifacts_build(const void *model, size_t size, size_t n_requires_grad,
                                           const char *const *requires_grad, size_t n_frozen, const char *const *frozen,
                                           const char *loss, const char *optimizer, size_t n_additional_outputs,
                                           const char *const *additional_outputs) {
    otter_artifacts_options o = {.n_requires_grad = n_requires_grad,
                                 .requires_grad = requires_grad,
                                 .n_frozen = n_frozen,
                                 .frozen = frozen,
                                 .n_additional_outputs = n_additional_outputs,
                                 .additional_outputs = additional_outputs};
    if (!otter_loss_from_name(loss, &o.loss)) {
        ot_error(OTTER_ERR_ARGUMENT,
                 "generateArtifacts: unknown loss '%s' (MSELoss, CrossEntropyLoss, BCEWithLogitsLoss, L1Loss, none)",
                 loss);
        return NULL;
    }
    if (ot_streq(optimizer, "AdamW")) {
        o.optimizer = OTTER_OPTIM_ADAMW;
    } else if (ot_streq(optimizer, "SGD")) {
        o.optimizer = OTTER_OPTIM_SGD;
    } else if (ot_streq(optimizer, "none")) {
        o.optimizer = OTTER_OPTIM_NONE;
    } else {
        ot_error(OTTER_ERR_ARGUMENT, "generateArtifacts: unknown optimizer '%s' (AdamW, SGD, none)", optimizer);
        return NULL;
    }
    otter_artifacts_adamw_defaults(&o);
    otter_model *m = NULL;
    if (otter_model_load_from_memory(&m, model, size, NULL) != OTTER_OK) return NULL;
    otter_artifacts *a = ot_calloc(1, sizeof *a);
    otter_status st = a ? otter_artifacts_build(a, m, &o) : OT_NOMEM();
    otter_model_free(m);
    if (st != OTTER_OK) {
        ot_free(a);
        return NULL;
    }
    return a;
}

/* One artifact's bytes (free with otter_free): 0 training, 1 eval, 2 optimizer model, 3 checkpoint. */
void *otter_web_artifacts_bytes(const otter_artifacts *a, int which, size_t *size) {
    void *data = NULL;
    if (which == 3) return otter_checkpoint_save_to_memory(a->checkpoint, NULL, &data, size) == OTTER_OK ? data : NULL;
    const otter_model *m = which == 0 ? a->training : which == 1 ? a->eval : a->optimizer;
    if (!m) {
        ot_error(OTTER_ERR_NOT_FOUND, "the artifacts have no optimizer model (built with optimizer 'none')");
        return NULL;
    }
    return otter_model_save_to_memory(m, &data, size) == OTTER_OK ? data : NULL;
}

void otter_web_artifacts_free(otter_artifacts *a) {
    otter_artifacts_free(a);
    ot_free(a);
}
