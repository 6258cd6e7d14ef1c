/* ONNX external data: tensor bytes kept in a side file next to the model, located by the
 * TensorProto's external_data entries (location, offset, length). */
#ifndef OTTER_FORMAT_EXTERNAL_DATA_H
#define OTTER_FORMAT_EXTERNAL_DATA_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "otter/tensor.h"

/* Allocate and fill t->data (t has its dims, no data yet) from the file named by t->extra->external,
 * relative to base_dir, after checking the file holds the bytes. Refuses absolute
 * locations and any that leave base_dir; checks offset and length against the file and the dims. */
otter_status ot_external_read(otter_tensor *t, const char *base_dir);

/* Which save wrote a data file. otter starts each data file it writes with a 64-byte header holding
 * a random generation (readers go by offsets, so others skip it) and records the generation in the
 * model's metadata under this prefix + the file's location. A save renames the model into place
 * before its data, so a crash in between pairs the new model with old data, which the load then
 * refuses instead of running on the wrong weights. */
#define OT_EXTERNAL_GENERATION_KEY "otter.external_data:"
#define OT_EXTERNAL_HEADER_SIZE    64

/* A data file being written next to a model, renamed into place on a successful close. */
typedef struct ot_external_sink {
    FILE *f;
    char *path;     /* final path */
    char *tmp_path; /* where it is written */
    char *location; /* what the model records: the file name relative to the model's folder */
    char generation[33];
    uint64_t size;
} ot_external_sink;

/* external_file NULL: "<model file name>.data" beside the model. */
otter_status ot_external_sink_open(ot_external_sink *s, const char *model_path, const char *external_file);
/* Append t's bytes at a 64-byte aligned offset. */
otter_status ot_external_append(ot_external_sink *s, const otter_tensor *t, uint64_t *offset);
/* commit: flush, sync and rename into place; otherwise delete. Safe to call twice. */
otter_status ot_external_sink_close(ot_external_sink *s, bool commit);

/* Refuse a data file whose otter header names another generation than the model recorded (a file
 * without otter's header was rewritten by another tool and is taken as it is). */
otter_status ot_external_check_generation(const char *base_dir, const char *location, const char *generation);

#endif
