/* Protobuf details otter keeps only to write a model back exactly as it was read:
 * fields protobuf-c did not know (unknown fields) and TensorProto storage choices.
 * Tensors and IR objects carry them (so they live in core); format/ fills them in and writes them out. */
#ifndef OTTER_CORE_PROTO_EXTRA_H
#define OTTER_CORE_PROTO_EXTRA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "otter/tensor.h"

typedef struct ot_unknown_field {
    uint32_t tag;
    int wire_type;
    size_t len;
    uint8_t *data;
} ot_unknown_field;

typedef struct ot_string_pair {
    char *key;
    char *value;
} ot_string_pair;

struct otter_proto_extra {
    size_t n_unknown;
    ot_unknown_field *unknown;
    /* TensorProto only. */
    char *doc_string;
    otter_tensor_storage storage;
    bool has_data_type;
    bool has_segment, has_segment_begin, has_segment_end;
    int64_t segment_begin, segment_end;
    size_t n_external;
    ot_string_pair *external; /* external_data key/value entries as read */
    bool has_data_location;
    int data_location;
};

struct otter_proto_extra *ot_proto_extra_new(void);
struct otter_proto_extra *ot_proto_extra_clone(const struct otter_proto_extra *e);
void ot_proto_extra_free(struct otter_proto_extra *e);

#endif
