/* The protobuf wire format, walked directly: varints, and the nesting-depth limit every decoder
 * applies before protobuf-c (which recurses without a limit) unpacks untrusted bytes. */
#ifndef OTTER_FORMAT_WIRE_H
#define OTTER_FORMAT_WIRE_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "otter/status.h"

/* Protobuf's own default recursion limit (its C++ and Python parsers); real ONNX models stay far
 * below it (a nested If costs 3 levels, a nested sequence type 2). */
#define OT_PB_MAX_DEPTH 100

/* Read a varint at *p (advanced past it); false when truncated or longer than 64 bits. */
bool ot_wire_varint(const uint8_t **p, const uint8_t *end, uint64_t *v);

/* One field of a message: its number and wire type; a varint's value, or a length-delimited field's
 * bytes (fixed-width fields are skipped over). */
typedef struct ot_wire_field {
    uint64_t number;
    int type; /* 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32 */
    uint64_t value;
    const uint8_t *bytes;
    size_t len;
} ot_wire_field;

/* Read the field at *p (advanced past it); false when malformed, or a group or unknown wire type. */
bool ot_wire_next(const uint8_t **p, const uint8_t *end, ot_wire_field *f);

/* OTTER_ERR_INVALID, naming the message type where the limit is crossed, when `data` nests messages
 * of `d` deeper than OT_PB_MAX_DEPTH; OTTER_OK otherwise (malformed bytes are left to protobuf-c). */
otter_status ot_pb_check_depth(const ProtobufCMessageDescriptor *d, const void *data, size_t size);

#endif
