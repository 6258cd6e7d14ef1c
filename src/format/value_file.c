/* Value files: a run's inputs and outputs of every kind, stored as ONNX's backend tests store them. A tensor is a
 * TensorProto (or a .npy array); seq(tensor) a SequenceProto; optional(T) an OptionalProto (onnx-data.proto's
 * messages, compiled from proto/onnx-data.proto). Which message a file holds is what the graph declares: the
 * messages share field numbers with different wire types, so a file does not say which it is. */
#include <string.h>

#include "core/core.h"
#include "format/onnx_proto.h"
#include "format/wire.h"
#include "onnx-data.pb-c.h"
#include "otter/io.h"

/* onnx-data.proto's elem_type of SequenceProto and OptionalProto. */
enum {
    KIND_UNDEFINED = 0,
    KIND_TENSOR = 1,
    KIND_SPARSE_TENSOR = 2,
    KIND_SEQUENCE = 3,
    KIND_MAP = 4,
    KIND_OPTIONAL = 5
};

static const char *kind_name(int kind) {
    switch (kind) {
    case KIND_TENSOR:
        return "tensors";
    case KIND_SPARSE_TENSOR:
        return "sparse tensors";
    case KIND_SEQUENCE:
        return "sequences";
    case KIND_MAP:
        return "maps";
    case KIND_OPTIONAL:
        return "optionals";
    default:
        return "values of an unknown kind";
    }
}

/* The element type a tensor declared as `t` must have (UNDEFINED: any). */
static otter_dtype declared_dtype(const otter_type *t) {
    return t && t->kind == OTTER_TYPE_TENSOR && t->has_elem_type ? t->elem_type : OTTER_DTYPE_UNDEFINED;
}

/* ONNX 1.12's backend data stores bfloat16 tensors as uint16 ones holding the bits (numpy has no bfloat16):
 * where bfloat16 is declared, such a tensor is its bits. */
static void adopt_bfloat16_bits(otter_tensor *t, otter_dtype want) {
    if (want == OTTER_DTYPE_BFLOAT16 && t->dtype == OTTER_DTYPE_UINT16) t->dtype = OTTER_DTYPE_BFLOAT16;
}

static otter_status tensor_of(otter_tensor **out, Onnx__TensorProto *p, otter_dtype want, const char *base_dir) {
    OT_TRY(ot_tensor_from_proto(out, p, base_dir));
    adopt_bfloat16_bits(*out, want);
    return OTTER_OK;
}

/* A SequenceProto of tensors; `declared` is the seq type (its element type fixes an empty sequence's). */
static otter_status sequence_of(otter_sequence **out, Onnx__SequenceProto *p, const otter_type *declared,
                                const char *base_dir) {
    int kind = p->has_elem_type ? p->elem_type : KIND_UNDEFINED;
    size_t others = p->n_sparse_tensor_values + p->n_sequence_values + p->n_map_values + p->n_optional_values;
    if ((kind != KIND_UNDEFINED && kind != KIND_TENSOR) || others)
        return ot_error(OTTER_ERR_UNSUPPORTED, "a sequence of %s: otter's sequences hold tensors",
                        kind_name(kind != KIND_UNDEFINED && kind != KIND_TENSOR ? kind
                                  : p->n_sparse_tensor_values                   ? KIND_SPARSE_TENSOR
                                  : p->n_sequence_values                        ? KIND_SEQUENCE
                                  : p->n_map_values                             ? KIND_MAP
                                                                                : KIND_OPTIONAL));
    otter_dtype want = declared_dtype(declared ? declared->elem : NULL);
    otter_sequence *q = NULL;
    OT_TRY(otter_sequence_create(&q, want));
    for (size_t i = 0; i < p->n_tensor_values; i++) {
        otter_tensor *t = NULL;
        otter_status s = tensor_of(&t, p->tensor_values[i], want, base_dir);
        if (s == OTTER_OK && (s = otter_sequence_append(q, t)) != OTTER_OK) otter_tensor_free(t);
        if (s != OTTER_OK) {
            otter_sequence_free(q);
            return ot_error_context(s, "sequence element %zu: ", i);
        }
    }
    *out = q;
    return OTTER_OK;
}

static otter_status optional_of(otter_arg *out, Onnx__OptionalProto *p, const otter_type *declared,
                                const char *base_dir) {
    int kind = p->has_elem_type ? p->elem_type : KIND_UNDEFINED;
    const otter_type *elem = declared ? declared->elem : NULL;
    if (kind == KIND_TENSOR && p->tensor_value) {
        otter_tensor *t = NULL;
        OT_TRY(tensor_of(&t, p->tensor_value, declared_dtype(elem), base_dir));
        *out = otter_arg_of_tensor(t);
    } else if (kind == KIND_SEQUENCE && p->sequence_value) {
        otter_sequence *q = NULL;
        OT_TRY(sequence_of(&q, p->sequence_value, elem, base_dir));
        *out = otter_arg_of_sequence(q);
    } else if (kind == KIND_TENSOR || kind == KIND_SEQUENCE) {
        return ot_error(OTTER_ERR_INVALID, "an OptionalProto of elem_type %d without its value", kind);
    } else if (kind == KIND_UNDEFINED) {
        *out = otter_arg_none(); /* the optional is empty */
    } else {
        return ot_error(OTTER_ERR_UNSUPPORTED, "an optional holding %s: otter's optionals hold a tensor or a sequence",
                        kind_name(kind));
    }
    return OTTER_OK;
}

/* The message `declared` calls for, from data; what names the source in errors. */
static otter_status value_parse(otter_arg *out, const void *data, size_t size, const otter_type *declared,
                                const char *what, const char *base_dir) {
    otter_status s = OTTER_OK;
    if (declared->kind == OTTER_TYPE_SEQUENCE || declared->kind == OTTER_TYPE_OPTIONAL) {
        const ProtobufCMessageDescriptor *d = declared->kind == OTTER_TYPE_SEQUENCE ? &onnx__sequence_proto__descriptor
                                                                                    : &onnx__optional_proto__descriptor;
        if ((s = ot_pb_check_depth(d, data, size)) != OTTER_OK) return ot_error_context(s, "%s: ", what);
    }
    if (declared->kind == OTTER_TYPE_SEQUENCE) {
        Onnx__SequenceProto *p = onnx__sequence_proto__unpack(&ot_protobuf_allocator, size, data);
        if (!p) return ot_error(OTTER_ERR_INVALID, "%s: not a valid SequenceProto (the value is a sequence)", what);
        otter_sequence *q = NULL;
        if ((s = sequence_of(&q, p, declared, base_dir)) == OTTER_OK) *out = otter_arg_of_sequence(q);
        onnx__sequence_proto__free_unpacked(p, &ot_protobuf_allocator);
    } else if (declared->kind == OTTER_TYPE_OPTIONAL) {
        Onnx__OptionalProto *p = onnx__optional_proto__unpack(&ot_protobuf_allocator, size, data);
        if (p) {
            s = optional_of(out, p, declared, base_dir);
            onnx__optional_proto__free_unpacked(p, &ot_protobuf_allocator);
        } else {
            s = ot_error(OTTER_ERR_INVALID, "not a valid OptionalProto (the value is an optional)");
        }
        if (s != OTTER_OK && declared->elem && declared->elem->kind == OTTER_TYPE_TENSOR) {
            /* a plain TensorProto for an optional tensor is that tensor (a scalar one even parses as an
             * OptionalProto, of elem_type data_type, without a value) */
            char why[512];
            snprintf(why, sizeof why, "%s", otter_last_error());
            otter_tensor *t = NULL;
            if (otter_tensor_load_pb_from_memory(&t, data, size) == OTTER_OK) {
                adopt_bfloat16_bits(t, declared_dtype(declared->elem));
                *out = otter_arg_of_tensor(t);
                return OTTER_OK;
            }
            s = ot_error(s, "%s (nor is it a TensorProto)", why);
        }
    } else {
        return ot_error(OTTER_ERR_UNSUPPORTED, "%s: the value is a %s, which otter's runtime cannot hold", what,
                        declared->kind == OTTER_TYPE_MAP ? "map" : "sparse tensor");
    }
    return s == OTTER_OK ? OTTER_OK : ot_error_context(s, "%s: ", what);
}

static bool is_tensor_type(const otter_type *t) {
    return !t || t->kind == OTTER_TYPE_NONE || t->kind == OTTER_TYPE_TENSOR;
}

otter_status otter_arg_load_pb_from_memory(otter_arg *out, const void *data, size_t size, const otter_type *declared) {
    if (!out) return ot_error(OTTER_ERR_ARGUMENT, "otter_arg_load_pb_from_memory: out is NULL");
    *out = (otter_arg){0};
    if (!data && size) return ot_error(OTTER_ERR_ARGUMENT, "otter_arg_load_pb_from_memory: data is NULL");
    if (is_tensor_type(declared)) {
        otter_tensor *t = NULL;
        OT_TRY(otter_tensor_load_pb_from_memory(&t, data, size));
        adopt_bfloat16_bits(t, declared_dtype(declared));
        *out = otter_arg_of_tensor(t);
        return OTTER_OK;
    }
    return value_parse(out, data ? data : "", size, declared, "<memory>", NULL);
}

static bool has_npy_extension(const char *path) {
    size_t n = strlen(path);
    return n >= 4 && (strcmp(path + n - 4, ".npy") == 0 || strcmp(path + n - 4, ".NPY") == 0);
}

otter_status otter_arg_load(otter_arg *out, const char *path, const otter_type *declared) {
    if (!out || !path) return ot_error(OTTER_ERR_ARGUMENT, "otter_arg_load: NULL argument");
    *out = (otter_arg){0};
    if (has_npy_extension(path)) {
        const otter_type *t = declared && declared->kind == OTTER_TYPE_OPTIONAL ? declared->elem : declared;
        if (!is_tensor_type(t))
            return ot_error(OTTER_ERR_INVALID, "%s: a .npy file holds a tensor, the value is a %s", path,
                            t->kind == OTTER_TYPE_SEQUENCE ? "sequence" : "map or a sparse tensor");
        otter_tensor *tensor = NULL;
        OT_TRY(otter_tensor_load_npy(&tensor, path));
        adopt_bfloat16_bits(tensor, declared_dtype(t));
        *out = otter_arg_of_tensor(tensor);
        return OTTER_OK;
    }
    if (is_tensor_type(declared)) {
        otter_tensor *t = NULL;
        OT_TRY(otter_tensor_load(&t, path)); /* by extension: .pb, or an error naming the extensions */
        adopt_bfloat16_bits(t, declared_dtype(declared));
        *out = otter_arg_of_tensor(t);
        return OTTER_OK;
    }
    void *data;
    size_t size;
    OT_TRY(ot_read_file(path, &data, &size));
    char *dir = ot_dirname(path);
    otter_status s = dir ? value_parse(out, data, size, declared, path, dir) : OT_NOMEM();
    ot_free(dir);
    ot_free(data);
    return s;
}

/* ---- writing: the protobuf wire format around ot_tensor_pack's TensorProto bytes ---- */

typedef struct wire {
    uint8_t *data;
    size_t size, cap;
} wire;

static otter_status put_raw(wire *w, const void *p, size_t n) {
    if (w->size + n > w->cap) OT_TRY(ot_grow((void **)&w->data, &w->cap, w->size + n, 1));
    memcpy(w->data + w->size, p, n);
    w->size += n;
    return OTTER_OK;
}

static otter_status put_varint(wire *w, uint64_t v) {
    uint8_t b[10];
    size_t n = 0;
    do {
        b[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return put_raw(w, b, n);
}

static otter_status put_int_field(wire *w, unsigned field, uint64_t v) {
    OT_TRY(put_varint(w, (uint64_t)field << 3));
    return put_varint(w, v);
}

static otter_status put_bytes_field(wire *w, unsigned field, const void *p, size_t n) {
    OT_TRY(put_varint(w, (uint64_t)field << 3 | 2));
    OT_TRY(put_varint(w, n));
    return put_raw(w, p, n);
}

static otter_status put_tensor_field(wire *w, unsigned field, const otter_tensor *t) {
    void *buf = NULL;
    size_t n = 0;
    OT_TRY(ot_tensor_pack(t, &buf, &n));
    otter_status s = put_bytes_field(w, field, buf, n);
    ot_free(buf);
    return s;
}

/* SequenceProto {2 elem_type TENSOR, 3 tensor_values}. */
static otter_status put_sequence(wire *w, const otter_sequence *q) {
    OT_TRY(put_int_field(w, 2, KIND_TENSOR));
    for (size_t i = 0; i < otter_sequence_length(q); i++) OT_TRY(put_tensor_field(w, 3, otter_sequence_at(q, i)));
    return OTTER_OK;
}

/* OptionalProto {2 elem_type, 3 tensor_value | 5 sequence_value}; elem_type UNDEFINED and no value when empty. */
static otter_status put_optional(wire *w, const otter_arg *a) {
    if (a->kind == OTTER_ARG_TENSOR) {
        OT_TRY(put_int_field(w, 2, KIND_TENSOR));
        return put_tensor_field(w, 3, a->tensor);
    }
    if (a->kind == OTTER_ARG_SEQUENCE) {
        wire inner = {0};
        otter_status s = put_sequence(&inner, a->sequence);
        if (s == OTTER_OK) s = put_int_field(w, 2, KIND_SEQUENCE);
        if (s == OTTER_OK) s = put_bytes_field(w, 5, inner.data, inner.size);
        ot_free(inner.data);
        return s;
    }
    return put_int_field(w, 2, KIND_UNDEFINED);
}

otter_status otter_arg_save_pb(const otter_arg *a, const otter_type *declared, const char *path) {
    if (!a || !path) return ot_error(OTTER_ERR_ARGUMENT, "otter_arg_save_pb: NULL argument");
    bool optional = a->kind == OTTER_ARG_NONE || (declared && declared->kind == OTTER_TYPE_OPTIONAL);
    if (!optional && a->kind == OTTER_ARG_TENSOR) return otter_tensor_save_pb(a->tensor, path);
    if ((a->kind == OTTER_ARG_TENSOR && !a->tensor) || (a->kind == OTTER_ARG_SEQUENCE && !a->sequence) ||
        a->kind == OTTER_ARG_UNSET)
        return ot_error(OTTER_ERR_ARGUMENT, "%s: the value to write is %s", path,
                        a->kind == OTTER_ARG_UNSET ? "unset" : "missing");
    wire w = {0};
    otter_status s = optional ? put_optional(&w, a) : put_sequence(&w, a->sequence);
    if (s != OTTER_OK)
        s = ot_error_context(s, "%s: ", path);
    else
        s = ot_write_file_atomic(path, w.data ? (const void *)w.data : "", w.size); /* its errors name path */
    ot_free(w.data);
    return s;
}
