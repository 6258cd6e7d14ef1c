/* Training session internals shared by session.c, state.c (checkpoint sync, properties, export),
 * schedule.c, feed.c and loop.c. */
#ifndef OTTER_TRAINING_INTERNAL_H
#define OTTER_TRAINING_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "otter/runtime.h"
#include "otter/training.h"
#include "runtime/optim.h"

/* One parameter: an input of the training graph that the checkpoint holds. */
typedef struct ot_training_param {
    char *name;
    bool trainable;
    bool is_f32;
    bool set;               /* holds a value (false for parameters of a nominal checkpoint not yet set) */
    otter_tensor value;     /* header: data in the trainable or frozen slab (float32), else owned */
    otter_tensor grad;      /* trainable: header over the gradient slab */
    const char *grad_input; /* trainable: name of its accumulation-buffer input (points into the model) */
    size_t numel;
    size_t off_all;   /* offset in the all-parameters buffer, SIZE_MAX when not float32 */
    size_t off_train; /* offset in the trainable slab / buffer, SIZE_MAX for frozen */
} ot_training_param;

/* Inputs of one run: user inputs first, then the fixed bindings (parameters, buffers, reset flag). */
typedef struct ot_training_binding {
    otter_session *sess;
    size_t n_user_in, n_user_out;
    const char **user_in; /* n_user_in names (into the model) */
    const otter_type **user_in_type;
    const char **user_out; /* n_user_out names */
    size_t n_run;          /* every input given to otter_session_run */
    const char **run_names;
    const otter_tensor **run_inputs;
} ot_training_binding;

typedef enum ot_training_optim_kind { TS_OPTIM_NONE = 0, TS_OPTIM_ADAMW, TS_OPTIM_SGD } ot_training_optim_kind;

struct otter_training_session {
    otter_checkpoint *ck;
    otter_model *train_m, *eval_m, *optim_m;
    ot_training_param *params; /* training graph order */
    size_t n_params;
    float *train_slab, *grad_slab, *m1, *m2; /* n_train each (m1, m2 once created) */
    float *frozen_slab;
    size_t n_train, n_frozen;
    ot_training_binding train, eval;
    otter_tensor reset_flag;
    uint8_t reset_value;
    bool accumulate; /* false: the next train step overwrites the buffers */
    /* optimizer */
    ot_training_optim_kind optim;
    ot_adamw_params adamw;
    bool clip;
    float clip_max_norm;
    const char *clip_norm_type;
    bool have_moments;
    int64_t step;
    float lr;
    bool have_sched;
    otter_lr_schedule sched;
    /* Dropout seeding */
    bool seed_set;
    uint64_t seed;
    uint64_t since_opt; /* train steps since the last optimizer step (Dropout stream index with step) */
    otter_node **dropouts;
    size_t n_dropouts;
};

/* state.c */
ot_training_param *ot_training_find_param(const otter_training_session *s, const char *name);
otter_status ot_training_require_all_set(const otter_training_session *s, const char *what);
/* The checkpoint's parameters and moments read the session's slabs instead of holding copies. */
void ot_training_share_with_checkpoint(otter_training_session *s);

/* feed.c: a dataset batch fitted to the graph's two user inputs (inputs reshaped to the model's per-sample
 * dims, class labels turned one-hot when the model's target is float). xv and yv are headers over the
 * batch (or onehot) to pass to the step. */
typedef struct ot_training_feed {
    otter_tensor xv, yv;
    otter_tensor *onehot; /* owned, grown as needed */
} ot_training_feed;
otter_status ot_training_feed_batch(const otter_training_session *s, otter_training_graph g, const otter_tensor *x,
                                    const otter_tensor *y, ot_training_feed *f);
void ot_training_feed_free(ot_training_feed *f);

#endif
