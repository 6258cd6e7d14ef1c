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
 * model's metadata under this prefix + the file's location. A load refuses a data file whose header
 * names another generation than its model records (files of two saves mixed by hand or by a tool). */
#define OT_EXTERNAL_GENERATION_KEY "otter.external_data:"
#define OT_EXTERNAL_HEADER_SIZE    64

/* A data file written next to a model. A save never overwrites a data file in place, since the live
 * model may read it (and files other tools wrote carry no generation to catch a mix): when the wanted
 * name is taken, the data goes to "<name>.<16 hex digits>" instead. The data is committed (synced,
 * renamed to its fresh name) before the model is renamed over the old one, so a crash at any point
 * leaves the old model with its old data or the new model with its new data; the files the previous
 * save used under the wanted name or its alternates are removed once the model is in place. */
typedef struct ot_external_sink {
    FILE *f;
    char *wanted_path; /* the name asked for (its alternates derive from it) */
    char *path;        /* final path: wanted_path, or an alternate when that is taken */
    char *tmp_path;    /* where it is written */
    char *location;    /* what the model records: the file name relative to the model's folder */
    char generation[33];
    uint64_t size;
    bool committed; /* renamed to path */
} ot_external_sink;

/* external_file NULL: "<model file name>.data" beside the model. */
otter_status ot_external_sink_open(ot_external_sink *s, const char *model_path, const char *external_file);
/* Append t's bytes at a 64-byte aligned offset. */
otter_status ot_external_append(ot_external_sink *s, const otter_tensor *t, uint64_t *offset);
/* Flush, sync and rename the data to its final name (before the model referencing it is renamed). */
otter_status ot_external_sink_commit(ot_external_sink *s);
/* model_saved: the model referencing this data is in place, so the files it superseded are removed;
 * otherwise uncommitted data is deleted. Safe to call twice. */
void ot_external_sink_close(ot_external_sink *s, bool model_saved);

/* Refuse a data file whose otter header names another generation than the model recorded (a file
 * without otter's header was rewritten by another tool and is taken as it is). */
otter_status ot_external_check_generation(const char *base_dir, const char *location, const char *generation);

#endif
