/* Checkpoint internals shared by checkpoint.c (the state, validation), checkpoint_read.c and
 * checkpoint_write.c (the ORT flatbuffer). */
#ifndef OTTER_FORMAT_CHECKPOINT_INTERNAL_H
#define OTTER_FORMAT_CHECKPOINT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "otter/checkpoint.h"

/* Schema slots (field index in declaration order). */
enum { CK_VERSION = 0, CK_MODULE_STATE = 1, CK_OPTIMIZER_GROUPS = 2, CK_PROPERTY_BAG = 3 };
enum { MS_REQUIRES_GRAD = 0, MS_FROZEN = 1, MS_IS_NOMINAL = 2, MS_HAS_EXTERNAL_DATA = 3 };
enum { OG_NAME = 0, OG_STEP = 1, OG_LR = 2, OG_STATES = 3 };
enum { PS_PARAM_NAME = 0, PS_MOMENTUMS = 1 };
enum { PB_INTS = 0, PB_FLOATS = 1, PB_STRINGS = 2 };
enum { PR_NAME = 0, PR_VALUE = 1 };
enum { T_NAME = 0, T_DOC = 1, T_DIMS = 2, T_DATA_TYPE = 3, T_RAW = 4, T_STRINGS = 5, T_EXTERNAL = 6 };

#define FB_MAX_SIZE ((size_t)0x7fffffff) /* flatbuffers offsets are 32-bit; buffers stay under 2 GiB */

typedef struct ot_tensor_list {
    otter_tensor **v;
    size_t n, cap;
} ot_tensor_list;

struct otter_checkpoint {
    int version;
    bool nominal;
    ot_tensor_list params[2]; /* OTTER_PARAM_TRAINABLE, OTTER_PARAM_FROZEN */
    otter_optimizer_group *groups;
    size_t n_groups, cap_groups;
    otter_property *props;
    size_t n_props, cap_props;
};

/* A name and what it names, sorted by name (ot_ckpt_cmp_named) to find duplicates and look names up. */
typedef struct ot_named {
    const char *name;
    const void *item;
} ot_named;
int ot_ckpt_cmp_named(const void *a, const void *b);

/* The rules of the spec that a whole state must meet (with_groups: the optimizer groups' too). */
otter_status ot_ckpt_validate(const otter_checkpoint *c, bool with_groups);
/* "[200, 784]" into buf. */
const char *ot_ckpt_shape_str(const otter_tensor *t, char *buf, size_t cap);
otter_status ot_ckpt_list_push(ot_tensor_list *l, otter_tensor *t);

/* "<path>.data": where the external data of the checkpoint at path lives (ORT's name for it). ot_free it. */
char *ot_ckpt_external_path(const char *path);

/* Load a checkpoint whose external data is in memory (ext_size bytes at ext) rather than in a file. */
otter_status ot_ckpt_load_parts(otter_checkpoint **out, const void *data, size_t size, const void *ext,
                                size_t ext_size);

/* Borrowed data, for a training session whose slabs hold the live values: the checkpoint then writes them
 * straight from the slabs, with no copy. The caller keeps data alive, and shaped like the tensor, while c
 * uses it. Make parameter `name` a view of data (its own copy freed): */
otter_status ot_ckpt_view_param(otter_checkpoint *c, const char *name, void *data);
/* Add or replace a momentum as a view of m's data (otter_checkpoint_add_optimizer_state without the copy). */
otter_status ot_ckpt_view_momentum(otter_checkpoint *c, const char *group, const char *param, const otter_tensor *m);
/* Every borrowed tensor gets its own copy again, before what it borrows from goes away (out of memory:
 * OTTER_ERR_NOMEM, and the tensors not copied lose their data rather than dangle). */
otter_status ot_ckpt_own_data(otter_checkpoint *c);

#endif
