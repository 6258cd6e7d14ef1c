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
bool ot_wire_next(const uint8_t **p, const uint8_t *end, ot_wire_field *f) {
    uint64_t key;
    if (!ot_wire_varint(p, end, &key)) return false;
    f->number = key >> 3;
    f->type = (int)(key & 7);
    f->bytes = NULL;
    f->len = 0;
    switch (f->type) {
    case 0:
        return ot_wire_varint(p, end, &f->value);
    case 1:
    case 5: {
        size_t n = f->type == 1 ? 8 : 4;
        if ((size_t)(end - *p) < n) return false;
        *p += n;
        return true;
    }
    case 2:
        if (!ot_wire_varint(p, end, &f->value) || f->value > (uint64_t)(end - *p)) return false;
        f->bytes = *p;
        f->len = (size_t)f->value;
        *p += f->len;
        return true;
    default:
        return false;
    }
}

/* Whether a message of `d` in [p, end), itself at `depth`, holds one nested past the limit; *at is
 * the message type found there. Recursion is bounded by the limit itself. Malformed bytes end the
 * walk: protobuf-c refuses them. */
static bool nested_too_deep(const ProtobufCMessageDescriptor *d, const uint8_t *p, const uint8_t *end, int depth,
                            const ProtobufCMessageDescriptor **at) {
    ot_wire_field f;
    while (p < end && ot_wire_next(&p, end, &f)) {
        if (f.type != 2 || f.number > UINT32_MAX) continue;
        const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(d, (unsigned)f.number);
        if (!fd || fd->type != PROTOBUF_C_TYPE_MESSAGE) continue;
        if (depth >= OT_PB_MAX_DEPTH) {
            *at = fd->descriptor;
            return true;
        }
        if (nested_too_deep(fd->descriptor, f.bytes, f.bytes + f.len, depth + 1, at)) return true;
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
