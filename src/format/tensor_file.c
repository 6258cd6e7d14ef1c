/* Tensor files: ONNX TensorProto (.pb, the backend tests' format) and dispatch by extension. */
#include <string.h>

#include "core/core.h"
#include "format/onnx_proto.h"
#include "format/wire.h"
#include "otter/io.h"

/* protobuf-c says only "failed"; walk the wire format to say where it went wrong. Returns false and
 * fills msg when the top level is malformed. */
static bool read_varint(const uint8_t *b, size_t size, size_t *pos, uint64_t *v) {
    const uint8_t *p = b + *pos;
    bool ok = ot_wire_varint(&p, b + size, v);
    *pos = (size_t)(p - b);
    return ok;
}

/* Wire types TensorProto's fields must use (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32). */
static int tensor_field_wire_type(uint64_t field, bool *packable) {
    *packable = false;
    switch (field) {
    case 1:  /* dims */
    case 5:  /* int32_data */
    case 7:  /* int64_data */
    case 11: /* uint64_data */
        *packable = true;
        return 0;
    case 2:  /* data_type */
    case 14: /* data_location */
        return 0;
    case 4: /* float_data */
        *packable = true;
        return 5;
    case 10: /* double_data */
        *packable = true;
        return 1;
    case 3:  /* segment */
    case 6:  /* string_data */
    case 8:  /* name */
    case 9:  /* raw_data */
    case 12: /* doc_string */
    case 13: /* external_data */
        return 2;
    default:
        return -1; /* unknown: any valid wire type */
    }
}

static void describe_wire_error(const uint8_t *b, size_t size, char *msg, size_t cap) {
    size_t pos = 0;
    snprintf(msg, cap, "protobuf decoding failed");
    while (pos < size) {
        size_t start = pos;
        uint64_t key, v;
        if (!read_varint(b, size, &pos, &key)) {
            snprintf(msg, cap, "truncated or overlong field key at byte %zu", start);
            return;
        }
        uint64_t field = key >> 3;
        int wt = (int)(key & 7);
        if (field == 0) {
            snprintf(msg, cap, "field number 0 at byte %zu", start);
            return;
        }
        if (wt != 0 && wt != 1 && wt != 2 && wt != 5) {
            snprintf(msg, cap, "invalid wire type %d in field %llu at byte %zu", wt, (unsigned long long)field, start);
            return;
        }
        bool packable;
        int want = tensor_field_wire_type(field, &packable);
        if (want >= 0 && wt != want && !(packable && wt == 2)) {
            snprintf(msg, cap, "field %llu has wire type %d, expected %d, at byte %zu", (unsigned long long)field, wt,
                     want, start);
            return;
        }
        switch (wt) {
        case 0:
            if (!read_varint(b, size, &pos, &v)) {
                snprintf(msg, cap, "truncated varint in field %llu at byte %zu", (unsigned long long)field, start);
                return;
            }
            break;
        case 1:
        case 5: {
            size_t n = wt == 1 ? 8 : 4;
            if (size - pos < n) {
                snprintf(msg, cap, "field %llu needs %zu bytes at byte %zu, %zu left", (unsigned long long)field, n,
                         pos, size - pos);
                return;
            }
            pos += n;
            break;
        }
        case 2:
            if (!read_varint(b, size, &pos, &v)) {
                snprintf(msg, cap, "truncated length of field %llu at byte %zu", (unsigned long long)field, start);
                return;
            }
            if (v > size - pos) {
                snprintf(msg, cap, "field %llu at byte %zu says %llu bytes, only %zu left", (unsigned long long)field,
                         start, (unsigned long long)v, size - pos);
                return;
            }
            pos += (size_t)v;
            break;
        }
    }
    snprintf(msg, cap, "protobuf decoding failed inside a nested field (%zu bytes)", size);
}

static otter_status pb_parse(otter_tensor **out, const void *data, size_t size, const char *what,
                             const char *base_dir) {
    *out = NULL;
    if (size == 0) return ot_error(OTTER_ERR_INVALID, "%s: empty file, not a TensorProto", what);
    Onnx__TensorProto *p = onnx__tensor_proto__unpack(&ot_protobuf_allocator, size, data);
    if (!p) {
        char msg[256];
        describe_wire_error(data, size, msg, sizeof msg);
        return ot_error(OTTER_ERR_INVALID, "%s: not a valid TensorProto: %s", what, msg);
    }
    otter_status s = ot_tensor_from_proto(out, p, base_dir);
    onnx__tensor_proto__free_unpacked(p, &ot_protobuf_allocator);
    if (s != OTTER_OK) {
        *out = NULL;
        return ot_error_context(s, "%s: ", what);
    }
    return OTTER_OK;
}

otter_status otter_tensor_load_pb_from_memory(otter_tensor **out, const void *data, size_t size) {
    if (!out) return ot_error(OTTER_ERR_ARGUMENT, "otter_tensor_load_pb_from_memory: out is NULL");
    *out = NULL;
    if (!data && size) return ot_error(OTTER_ERR_ARGUMENT, "otter_tensor_load_pb_from_memory: data is NULL");
    return pb_parse(out, data ? data : "", size, "<memory>", NULL);
}

otter_status otter_tensor_load_pb(otter_tensor **out, const char *path) {
    if (!out || !path) return ot_error(OTTER_ERR_ARGUMENT, "otter_tensor_load_pb: NULL argument");
    *out = NULL;
    void *data;
    size_t size;
    OT_TRY(ot_read_file(path, &data, &size));
    char *dir = ot_dirname(path);
    if (!dir) {
        ot_free(data);
        return OT_NOMEM();
    }
    otter_status s = pb_parse(out, data, size, path, dir);
    ot_free(dir);
    ot_free(data);
    return s;
}

otter_status otter_tensor_save_pb(const otter_tensor *t, const char *path) {
    if (!t || !path) return ot_error(OTTER_ERR_ARGUMENT, "otter_tensor_save_pb: NULL argument");
    void *buf = NULL;
    size_t n = 0;
    otter_status s = ot_tensor_pack(t, &buf, &n);
    if (s != OTTER_OK) return ot_error_context(s, "%s: ", path);
    s = ot_write_file_atomic(path, buf, n);
    ot_free(buf);
    return s;
}

/* ---- by extension ---- */

typedef enum { EXT_OTHER, EXT_NPY, EXT_PB } file_ext;

static file_ext path_ext(const char *path) {
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(path, '.');
    if (!dot || (slash && dot < slash)) return EXT_OTHER;
    char e[5] = {0};
    size_t n = strlen(dot + 1);
    if (n == 0 || n > 3) return EXT_OTHER;
    for (size_t i = 0; i < n; i++) {
        char c = dot[1 + i];
        e[i] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    }
    if (strcmp(e, "npy") == 0) return EXT_NPY;
    if (strcmp(e, "pb") == 0) return EXT_PB;
    return EXT_OTHER;
}

otter_status otter_tensor_load(otter_tensor **out, const char *path) {
    if (!out || !path) return ot_error(OTTER_ERR_ARGUMENT, "otter_tensor_load: NULL argument");
    *out = NULL;
    switch (path_ext(path)) {
    case EXT_NPY:
        return otter_tensor_load_npy(out, path);
    case EXT_PB:
        return otter_tensor_load_pb(out, path);
    default:
        return ot_error(OTTER_ERR_ARGUMENT, "%s: unknown tensor file type (expected a .npy or .pb extension)", path);
    }
}

otter_status otter_tensor_save(const otter_tensor *t, const char *path) {
    if (!t || !path) return ot_error(OTTER_ERR_ARGUMENT, "otter_tensor_save: NULL argument");
    switch (path_ext(path)) {
    case EXT_NPY:
        return otter_tensor_save_npy(t, path);
    case EXT_PB:
        return otter_tensor_save_pb(t, path);
    default:
        return ot_error(OTTER_ERR_ARGUMENT, "%s: unknown tensor file type (expected a .npy or .pb extension)", path);
    }
}
