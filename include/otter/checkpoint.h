/* otter: training checkpoints in ONNX Runtime's flatbuffer format (file identifier "ODTC").
 *
 * An otter_checkpoint is an opaque handle holding what ORT's CheckpointState holds:
 *   - the module state: trainable ("requires_grad") and frozen parameters, each an otter_tensor with a unique
 *     name (unique across both lists), and the is_nominal_state flag;
 *   - optimizer groups ("group0" for everything ORT writes): step, initial learning rate and, per trainable
 *     parameter, named momentum tensors ("momentum0", "momentum1" for AdamW);
 *   - a property bag of named int64, float and string values (names unique across the three kinds).
 *
 * Reading accepts versions 1 (ORT 1.17) and 2 (ORT 1.18, 1.19); writing produces version 2 by default. Every
 * malformed structure is an OTTER_ERR_INVALID naming the object and the byte offset at fault; valid files
 * otter does not handle (versions other than 1 and 2, element types otter lacks, external data in memory) are
 * OTTER_ERR_UNSUPPORTED.
 *
 * A nominal state ("nominal_checkpoint") keeps dtype and dims but no values: its tensors' data is NULL even
 * when they have elements. Set every tensor with otter_checkpoint_set_param, then
 * otter_checkpoint_set_nominal(c, false).
 *
 * Read access is through const pointers into the handle, valid until the next call that changes it. */
#ifndef OTTER_CHECKPOINT_H
#define OTTER_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "otter/status.h"
#include "otter/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct otter_checkpoint otter_checkpoint;

#define OTTER_CHECKPOINT_VERSION 2 /* what otter writes by default */

/* ---- life cycle, files ---------------------------------------------------------------------- */

/* An empty version-2 state: no parameters, no optimizer groups, no properties. */
OTTER_API otter_status otter_checkpoint_create(otter_checkpoint **out);
OTTER_API void otter_checkpoint_free(otter_checkpoint *c);

/* Load a checkpoint file (errors name the path), and its external data file "<path>.data" when the checkpoint
 * has one. The file is mapped and each tensor's pages released once copied, external data read straight
 * into the tensors: loading needs about the state's size in memory, not twice it. */
OTTER_API otter_status otter_checkpoint_load(otter_checkpoint **out, const char *path);
/* Load from memory; the buffer is copied from, not kept. A checkpoint with external data can't load from
 * memory (OTTER_ERR_UNSUPPORTED): load it from its file. */
OTTER_API otter_status otter_checkpoint_load_from_memory(otter_checkpoint **out, const void *data, size_t size);

typedef struct otter_checkpoint_save_options {
    /* 0 or 2: version 2 (ORT 1.18/1.19). 1: ORT 1.17's version (a nominal state can't be written as 1). */
    int version;
    /* Write parameters, groups, parameter states, momentums and properties in the order the handle holds them
     * (the order read, then the order added), as ORT's Python tool does. Default (false): sorted by name,
     * as ORT writes a live state. */
    bool keep_order;
    /* Leave the optimizer groups out (ORT's SaveCheckpoint with include_optimizer_state = false). */
    bool skip_optimizer_state;
    /* A file save whose tensors hold this many bytes or more keeps their data in an external data file, as
     * ONNX Runtime 1.18+ does past 2 GiB: "<path>.data" beside the checkpoint, each tensor of 64 bytes or more
     * at an aligned offset that the flatbuffer gives (Tensor.external_data_offset; ModuleState.has_external_data
     * set). 0: OTTER_CHECKPOINT_EXTERNAL_THRESHOLD; UINT64_MAX: never (past 2 GiB the save fails). Version 2
     * only; memory saves are always one flatbuffer. */
    uint64_t external_data_threshold;
} otter_checkpoint_save_options;

/* ORT's default external data threshold (1800 MiB, under the 2 GiB limit with room for the tables). */
#define OTTER_CHECKPOINT_EXTERNAL_THRESHOLD ((uint64_t)1800 << 20)

/* Write atomically (temporary file, fsync, rename; with external data, "<path>.data" first, the same way).
 * opts may be NULL (defaults). The state is checked first: when optimizer groups are written, every trainable
 * parameter has a state in every group and every momentum has its parameter's dtype and dims. Tensor data is
 * written straight from the tensors: a save needs memory for the tables only, not a copy of the state. */
OTTER_API otter_status otter_checkpoint_save(const otter_checkpoint *c, const char *path,
                                             const otter_checkpoint_save_options *opts);
/* What otter_checkpoint_save would write, without writing: the checkpoint file's size and the external data
 * file's (0: none). Fails as the save would (an invalid state, a state past 2 GiB that can't go external). */
OTTER_API otter_status otter_checkpoint_save_plan(const otter_checkpoint *c, const otter_checkpoint_save_options *opts,
                                                  uint64_t *file_bytes, uint64_t *external_bytes);
/* Serialize to a buffer allocated with the library's allocator (free with otter_free). */
OTTER_API otter_status otter_checkpoint_save_to_memory(const otter_checkpoint *c,
                                                       const otter_checkpoint_save_options *opts, void **data,
                                                       size_t *size);

/* ---- module state ---------------------------------------------------------------------------- */

/* The version of the file read (1 or 2); OTTER_CHECKPOINT_VERSION for a state made in memory. */
OTTER_API int otter_checkpoint_version(const otter_checkpoint *c);
OTTER_API bool otter_checkpoint_is_nominal(const otter_checkpoint *c);
/* true: drop every tensor's values (parameters and momentums), keeping dtypes and dims.
 * false: allowed only once every tensor holds data (else OTTER_ERR_INVALID naming the first that doesn't). */
OTTER_API otter_status otter_checkpoint_set_nominal(otter_checkpoint *c, bool nominal);

typedef enum otter_param_kind { OTTER_PARAM_TRAINABLE = 0, OTTER_PARAM_FROZEN = 1 } otter_param_kind;

OTTER_API size_t otter_checkpoint_param_count(const otter_checkpoint *c, otter_param_kind kind);
/* The i-th parameter of a list (NULL when i is out of range). */
OTTER_API const otter_tensor *otter_checkpoint_param_at(const otter_checkpoint *c, otter_param_kind kind, size_t i);
/* A parameter by name in either list; kind (may be NULL) tells which. OTTER_ERR_NOT_FOUND when absent. */
OTTER_API otter_status otter_checkpoint_get_param(const otter_checkpoint *c, const char *name, const otter_tensor **out,
                                                  otter_param_kind *kind);
/* Append a copy of t (which must be named, with a name not yet used by a parameter). In a nominal state only
 * dtype and dims are kept; otherwise t must hold data. */
OTTER_API otter_status otter_checkpoint_add_param(otter_checkpoint *c, otter_param_kind kind, const otter_tensor *t);
/* Replace the values of an existing parameter with a copy of t's (same dtype and dims; t's name is ignored). */
OTTER_API otter_status otter_checkpoint_set_param(otter_checkpoint *c, const char *name, const otter_tensor *t);
/* Remove a parameter and its optimizer states. OTTER_ERR_NOT_FOUND when absent. */
OTTER_API otter_status otter_checkpoint_remove_param(otter_checkpoint *c, const char *name);

/* ---- optimizer state ------------------------------------------------------------------------- */

typedef struct otter_param_optimizer_state {
    char *param_name;
    size_t n_momentums;
    otter_tensor **momentums; /* each named ("momentum0", "momentum1", ...) */
} otter_param_optimizer_state;

typedef struct otter_optimizer_group {
    char *name; /* "group0" */
    int64_t step;
    float initial_learning_rate;
    size_t n_states;
    otter_param_optimizer_state *states;
} otter_optimizer_group;

OTTER_API size_t otter_checkpoint_group_count(const otter_checkpoint *c);
OTTER_API const otter_optimizer_group *otter_checkpoint_group_at(const otter_checkpoint *c, size_t i);
/* A group by name; OTTER_ERR_NOT_FOUND when absent. */
OTTER_API otter_status otter_checkpoint_get_group(const otter_checkpoint *c, const char *group,
                                                  const otter_optimizer_group **out);
/* Create the group (name NULL: "group0") or, when it exists, set its step and initial learning rate. */
OTTER_API otter_status otter_checkpoint_set_group(otter_checkpoint *c, const char *group, int64_t step,
                                                  float initial_learning_rate);
/* Add (or replace) a copy of the momentum tensor m, named by m->name (e.g. "momentum0"), to the state of the
 * trainable parameter param in the group (NULL: "group0"), creating the group (step 0, learning rate 0) and
 * the parameter's state when needed. m must have the parameter's dtype and dims. */
OTTER_API otter_status otter_checkpoint_add_optimizer_state(otter_checkpoint *c, const char *group, const char *param,
                                                            const otter_tensor *m);
/* A momentum by group (NULL: "group0"), parameter and momentum name; OTTER_ERR_NOT_FOUND when absent. */
OTTER_API otter_status otter_checkpoint_get_optimizer_state(const otter_checkpoint *c, const char *group,
                                                            const char *param, const char *momentum,
                                                            const otter_tensor **out);
/* Remove every optimizer group. */
OTTER_API void otter_checkpoint_clear_optimizer_state(otter_checkpoint *c);

/* ---- properties ------------------------------------------------------------------------------ */

typedef enum otter_property_type {
    OTTER_PROPERTY_INT = 0,
    OTTER_PROPERTY_FLOAT = 1,
    OTTER_PROPERTY_STRING = 2
} otter_property_type;

typedef struct otter_property {
    char *name;
    otter_property_type type;
    int64_t i;
    float f;
    char *s; /* STRING (NUL-terminated) */
} otter_property;

OTTER_API size_t otter_checkpoint_property_count(const otter_checkpoint *c);
OTTER_API const otter_property *otter_checkpoint_property_at(const otter_checkpoint *c, size_t i);
/* By name; OTTER_ERR_NOT_FOUND when absent. */
OTTER_API otter_status otter_checkpoint_get_property(const otter_checkpoint *c, const char *name,
                                                     const otter_property **out);
/* Add a property, or replace the one of that name (whatever its type), like ORT's AddProperty. */
OTTER_API otter_status otter_checkpoint_set_property_int(otter_checkpoint *c, const char *name, int64_t value);
OTTER_API otter_status otter_checkpoint_set_property_float(otter_checkpoint *c, const char *name, float value);
OTTER_API otter_status otter_checkpoint_set_property_string(otter_checkpoint *c, const char *name, const char *value);

#ifdef __cplusplus
}
#endif
#endif
