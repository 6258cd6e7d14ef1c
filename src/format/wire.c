/* Wire-format walking shared by the decoders (see wire.h). */
#include "format/wire.h"

#include "core/core.h"

bool ot_wire_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    uint64_t x = 0;
    for (int shift = 0; shift < 70 && *p < end; shift += 7) {
        uint8_t c = *(*p)++;
        if (shift == 63 && (c & 0x7e)) return false; /* more than 64 bits */
        x |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false;
}

/* Whether a message of `d` in [p, end), itself at `depth`, holds one nested past the limit; *at is
 * the message type found there. Recursion is bounded by the limit itself. */
static bool nested_too_deep(const ProtobufCMessageDescriptor *d, const uint8_t *p, const uint8_t *end, int depth,
                            const ProtobufCMessageDescriptor **at) {
    while (p < end) {
        uint64_t key, v;
        if (!ot_wire_varint(&p, end, &key)) return false;
        switch (key & 7) {
        case 0:
            if (!ot_wire_varint(&p, end, &v)) return false;
            break;
        case 1:
            if (end - p < 8) return false;
            p += 8;
            break;
        case 5:
            if (end - p < 4) return false;
            p += 4;
            break;
        case 2: {
            if (!ot_wire_varint(&p, end, &v) || v > (uint64_t)(end - p)) return false;
            uint64_t field = key >> 3;
            const ProtobufCFieldDescriptor *f =
                field <= UINT32_MAX ? protobuf_c_message_descriptor_get_field(d, (unsigned)field) : NULL;
            if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
                if (depth >= OT_PB_MAX_DEPTH) {
                    *at = f->descriptor;
                    return true;
                }
                if (nested_too_deep(f->descriptor, p, p + v, depth + 1, at)) return true;
            }
            p += v;
            break;
        }
        default: /* groups and invalid wire types: protobuf-c refuses them */
            return false;
        }
    }
    return false;
}

otter_status ot_pb_check_depth(const ProtobufCMessageDescriptor *d, const void *data, size_t size) {
    const ProtobufCMessageDescriptor *at = NULL;
    const uint8_t *p = data;
    if (!nested_too_deep(d, p, p + size, 1, &at)) return OTTER_OK;
    return ot_error(OTTER_ERR_INVALID,
                    "protobuf messages nested more than %d deep (%s at depth %d inside %s): refusing a crafted "
                    "or corrupt file",
                    OT_PB_MAX_DEPTH, at->name, OT_PB_MAX_DEPTH + 1, d->name);
}
