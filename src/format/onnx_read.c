/* Reading: ModelProto -> otter_model and TensorProto -> otter_tensor. Every field otter knows is copied
 * into its IR and unknown fields are kept as raw bytes, so writing back (onnx_write.c) produces a model
 * that decodes equal to the original. */
#include "format/onnx_proto.h"

#include <string.h>

#include "core/core.h"
#include "core/float_formats.h"
#include "core/proto_extra.h"
#include "format/external_data.h"
#include "format/function.h"
#include "format/wire.h"
#include "otter/io.h"

/* ---- allocators --------------------------------------------------------------------------- */

/* protobuf-c reports a failed allocation the same way as corrupt input; this tells them apart. */
static _Thread_local bool pb_alloc_failed;

static void *pb_alloc(void *data, size_t size) {
    (void)data;
    void *p = ot_malloc(size);
    if (!p) pb_alloc_failed = true;
    return p;
}
static void pb_free(void *data, void *p) {
    (void)data;
    ot_free(p);
}
ProtobufCAllocator ot_protobuf_allocator = {pb_alloc, pb_free, NULL};

/* ---- unknown and unmodeled fields ---------------------------------------------------------- */

static otter_status append_field(struct otter_proto_extra **extra, uint32_t tag, int wire_type, const uint8_t *data,
                                 size_t len) {
    if (!*extra && !(*extra = ot_proto_extra_new())) return OT_NOMEM();
    struct otter_proto_extra *e = *extra;
    ot_unknown_field *grown = ot_realloc(e->unknown, (e->n_unknown + 1) * sizeof *grown);
    if (!grown) return OT_NOMEM();
    e->unknown = grown;
    ot_unknown_field *d = &e->unknown[e->n_unknown];
    if (!(d->data = ot_malloc(len ? len : 1))) return OT_NOMEM();
    if (len) memcpy(d->data, data, len);
    d->tag = tag;
    d->wire_type = wire_type;
    d->len = len;
    e->n_unknown++;
    return OTTER_OK;
}

static otter_status keep_unknown(struct otter_proto_extra **extra, const ProtobufCMessage *m) {
    /* protobuf-c accepts field number 0 (an over-long key), which no encoder may write: refuse it
     * rather than keep bytes that can't be written back. */
    for (size_t i = 0; i < m->n_unknown_fields; i++)
        if (m->unknown_fields[i].tag == 0)
            return ot_error(OTTER_ERR_INVALID, "invalid protobuf: a field numbered 0 in %s", m->descriptor->name);
    for (size_t i = 0; i < m->n_unknown_fields; i++) {
        const ProtobufCMessageUnknownField *u = &m->unknown_fields[i];
        OT_TRY(append_field(extra, u->tag, (int)u->wire_type, u->data, u->len));
    }
    return OTTER_OK;
}

/* Repeated message fields the bindings decode but otter's IR does not model (metadata_props below
 * the model, device configurations; IR 10-13): kept in wire form (length prefix and message, as
 * protobuf-c keeps unknown fields) beside the unknown fields, so writing the model puts them back. */
static otter_status keep_unmodeled(struct otter_proto_extra **extra, const ProtobufCMessage *m, const uint32_t *fields,
                                   size_t n_fields) {
    for (size_t f = 0; f < n_fields; f++) {
        const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(m->descriptor, fields[f]);
        OT_ASSERT(fd && fd->label == PROTOBUF_C_LABEL_REPEATED && fd->type == PROTOBUF_C_TYPE_MESSAGE);
        size_t count = *(const size_t *)((const char *)m + fd->quantifier_offset);
        ProtobufCMessage *const *items = *(ProtobufCMessage *const *const *)((const char *)m + fd->offset);
        for (size_t i = 0; i < count; i++) {
            size_t len = protobuf_c_message_get_packed_size(items[i]);
            uint8_t *buf = ot_malloc(len + 10);
            if (!buf) return OT_NOMEM();
            size_t pre = 0;
            for (uint64_t v = len; pre == 0 || v; v >>= 7) buf[pre++] = (uint8_t)((v & 0x7f) | (v >> 7 ? 0x80 : 0));
            protobuf_c_message_pack(items[i], buf + pre);
            otter_status s = append_field(extra, fd->id, PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED, buf, pre + len);
            ot_free(buf);
            OT_TRY(s);
        }
    }
    return OTTER_OK;
}

/* The metadata_props field of ValueInfoProto, NodeProto, GraphProto and TensorProto; NodeProto's
 * device_configurations and ModelProto's configuration. */
static const uint32_t value_unmodeled[] = {4};
static const uint32_t node_unmodeled[] = {9, 10};
static const uint32_t graph_unmodeled[] = {16};
static const uint32_t tensor_unmodeled[] = {16};
static const uint32_t model_unmodeled[] = {26};
#define KEEP_UNMODELED(extra, m, fields) keep_unmodeled(extra, m, fields, sizeof fields / sizeof fields[0])

/* ---- reading: helpers --------------------------------------------------------------------- */

static otter_status dup_field(char **dst, const char *src) {
    *dst = NULL;
    if (!src) return OTTER_OK;
    return (*dst = ot_strdup(src)) ? OTTER_OK : OT_NOMEM();
}

static otter_status bytes_from_pb(otter_bytes *dst, const ProtobufCBinaryData *b) {
    dst->len = b->len;
    dst->data = ot_strndup(b->len ? (const char *)b->data : "", b->len);
    return dst->data ? OTTER_OK : OT_NOMEM();
}

/* A sub-message otter keeps opaque: serialized bytes. */
static otter_status pack_opaque(otter_bytes *dst, const ProtobufCMessage *m) {
    size_t n = protobuf_c_message_get_packed_size(m);
    if (!(dst->data = ot_malloc(n + 1))) return OT_NOMEM();
    dst->len = protobuf_c_message_pack(m, (uint8_t *)dst->data);
    dst->data[dst->len] = '\0';
    /* Saving unpacks these bytes again: refuse now what protobuf-c accepted but can't read back
     * (malformed nested fields), rather than fail when the model is written. */
    pb_alloc_failed = false;
    ProtobufCMessage *check =
        protobuf_c_message_unpack(m->descriptor, &ot_protobuf_allocator, dst->len, (const uint8_t *)dst->data);
    if (!check) {
        ot_free(dst->data);
        dst->data = NULL;
        dst->len = 0;
        return pb_alloc_failed ? OT_NOMEM()
                               : ot_error(OTTER_ERR_INVALID, "invalid protobuf: a %s does not decode after re-encoding",
                                          m->descriptor->name);
    }
    protobuf_c_message_free_unpacked(check, &ot_protobuf_allocator);
    return OTTER_OK;
}

static otter_status pack_opaque_array(otter_bytes **dst, size_t *n_dst, ProtobufCMessage *const *src, size_t n) {
    if (!n) return OTTER_OK;
    if (!(*dst = ot_calloc(n, sizeof **dst))) return OT_NOMEM();
    for (; *n_dst < n; (*n_dst)++) OT_TRY(pack_opaque(&(*dst)[*n_dst], src[*n_dst]));
    return OTTER_OK;
}

/* ---- reading: tensors --------------------------------------------------------------------- */

static const char *tname(const Onnx__TensorProto *p) { return p->name ? p->name : ""; }

/* Typed-field element count that holds `numel` elements of dtype, and which field it is. */
static otter_status typed_source(const Onnx__TensorProto *p, otter_dtype dt, size_t *count, const char **field) {
    switch (dt) {
    case OTTER_DTYPE_FLOAT:
        *count = p->n_float_data;
        *field = "float_data";
        break;
    case OTTER_DTYPE_COMPLEX64:
        *count = p->n_float_data / 2;
        *field = "float_data";
        break;
    case OTTER_DTYPE_DOUBLE:
        *count = p->n_double_data;
        *field = "double_data";
        break;
    case OTTER_DTYPE_COMPLEX128:
        *count = p->n_double_data / 2;
        *field = "double_data";
        break;
    case OTTER_DTYPE_INT64:
        *count = p->n_int64_data;
        *field = "int64_data";
        break;
    case OTTER_DTYPE_UINT32:
    case OTTER_DTYPE_UINT64:
        *count = p->n_uint64_data;
        *field = "uint64_data";
        break;
    case OTTER_DTYPE_STRING:
        *count = p->n_string_data;
        *field = "string_data";
        break;
    default:
        *count = p->n_int32_data;
        *field = "int32_data";
        break;
    }
    return OTTER_OK;
}

/* n elements from the typed field (for the 4- and 2-bit types, n is the count of int32_data entries,
 * each one packed byte). */
static otter_status copy_typed(otter_tensor *t, const Onnx__TensorProto *p, size_t n) {
    if (ot_dtype_packed(t->dtype)) {
        uint8_t *packed = ot_malloc(n);
        if (!packed) return OT_NOMEM();
        for (size_t i = 0; i < n; i++) packed[i] = (uint8_t)p->int32_data[i];
        ot_unpack_elems(t->dtype, packed, (size_t)otter_tensor_numel(t), t->data);
        ot_free(packed);
        return OTTER_OK;
    }
    switch (t->dtype) {
    case OTTER_DTYPE_FLOAT:
        memcpy(t->data, p->float_data, n * 4);
        break;
    case OTTER_DTYPE_COMPLEX64:
        memcpy(t->data, p->float_data, n * 8);
        break;
    case OTTER_DTYPE_DOUBLE:
        memcpy(t->data, p->double_data, n * 8);
        break;
    case OTTER_DTYPE_COMPLEX128:
        memcpy(t->data, p->double_data, n * 16);
        break;
    case OTTER_DTYPE_INT64:
        memcpy(t->data, p->int64_data, n * 8);
        break;
    case OTTER_DTYPE_UINT64:
        memcpy(t->data, p->uint64_data, n * 8);
        break;
    case OTTER_DTYPE_UINT32:
        for (size_t i = 0; i < n; i++) ((uint32_t *)t->data)[i] = (uint32_t)p->uint64_data[i];
        break;
    case OTTER_DTYPE_INT32:
        memcpy(t->data, p->int32_data, n * 4);
        break;
    case OTTER_DTYPE_INT16:
        for (size_t i = 0; i < n; i++) ((int16_t *)t->data)[i] = (int16_t)p->int32_data[i];
        break;
    case OTTER_DTYPE_INT8:
        for (size_t i = 0; i < n; i++) ((int8_t *)t->data)[i] = (int8_t)p->int32_data[i];
        break;
    case OTTER_DTYPE_UINT16:
    case OTTER_DTYPE_FLOAT16:
    case OTTER_DTYPE_BFLOAT16:
        for (size_t i = 0; i < n; i++) ((uint16_t *)t->data)[i] = (uint16_t)p->int32_data[i];
        break;
    case OTTER_DTYPE_UINT8:
    case OTTER_DTYPE_FLOAT8E4M3FN:
    case OTTER_DTYPE_FLOAT8E4M3FNUZ:
    case OTTER_DTYPE_FLOAT8E5M2:
    case OTTER_DTYPE_FLOAT8E5M2FNUZ:
    case OTTER_DTYPE_FLOAT8E8M0:
        for (size_t i = 0; i < n; i++) ((uint8_t *)t->data)[i] = (uint8_t)p->int32_data[i];
        break;
    case OTTER_DTYPE_BOOL:
        for (size_t i = 0; i < n; i++) ((uint8_t *)t->data)[i] = p->int32_data[i] != 0;
        break;
    default:
        OT_ASSERT(0);
    }
    return OTTER_OK;
}

static otter_status tensor_extra_from_proto(otter_tensor *t, const Onnx__TensorProto *p) {
    struct otter_proto_extra *e = ot_proto_extra_new();
    if (!e) return OT_NOMEM();
    t->extra = e;
    OT_TRY(dup_field(&e->doc_string, p->doc_string));
    e->has_data_type = p->has_data_type;
    if (p->segment) {
        e->has_segment = true;
        e->has_segment_begin = p->segment->has_begin;
        e->has_segment_end = p->segment->has_end;
        e->segment_begin = p->segment->begin;
        e->segment_end = p->segment->end;
    }
    e->has_data_location = p->has_data_location;
    e->data_location = (int)p->data_location;
    if (p->n_external_data) {
        if (!(e->external = ot_calloc(p->n_external_data, sizeof *e->external))) return OT_NOMEM();
        for (; e->n_external < p->n_external_data; e->n_external++) {
            const Onnx__StringStringEntryProto *kv = p->external_data[e->n_external];
            OT_TRY(dup_field(&e->external[e->n_external].key, kv->key ? kv->key : ""));
            OT_TRY(dup_field(&e->external[e->n_external].value, kv->value ? kv->value : ""));
        }
    }
    OT_TRY(keep_unknown(&t->extra, &p->base));
    return KEEP_UNMODELED(&t->extra, &p->base, tensor_unmodeled);
}

static otter_status tensor_from_proto(otter_tensor **out, Onnx__TensorProto *p, const char *base_dir) {
    *out = NULL;
    otter_dtype dt = (otter_dtype)p->data_type;
    if (!p->has_data_type || dt <= OTTER_DTYPE_UNDEFINED || dt >= OTTER_DTYPE_COUNT_)
        return ot_error(OTTER_ERR_INVALID, "tensor '%s': invalid data_type %d", tname(p), (int)p->data_type);
    if (p->n_dims > OTTER_MAX_RANK)
        return ot_error(OTTER_ERR_UNSUPPORTED, "tensor '%s': rank %zu exceeds otter's limit of %d", tname(p), p->n_dims,
                        OTTER_MAX_RANK);
    for (size_t i = 0; i < p->n_dims; i++)
        if (p->dims[i] < 0)
            return ot_error(OTTER_ERR_INVALID, "tensor '%s': dimension %zu is negative (%lld)", tname(p), i,
                            (long long)p->dims[i]);
    otter_status s = ot_tensor_shell(out, p->name, dt, (int)p->n_dims, p->dims);
    if (s != OTTER_OK) return ot_error_context(s, "tensor '%s': ", tname(p));
    otter_tensor *t = *out;
    if ((s = tensor_extra_from_proto(t, p)) != OTTER_OK) goto fail;

    /* Sizes are checked against the data actually present before any allocation, so a tiny
     * file can't ask for gigabytes. */
    size_t numel = (size_t)otter_tensor_numel(t);
    bool external = p->has_data_location && p->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    if (external) {
        t->extra->storage = OTTER_STORAGE_EXTERNAL;
        s = ot_external_read(t, base_dir); /* checks the file's size, then allocates */
    } else if (p->has_raw_data) {
        t->extra->storage = OTTER_STORAGE_RAW;
        if (dt == OTTER_DTYPE_STRING)
            s = ot_error(OTTER_ERR_INVALID, "tensor '%s': string tensors can't use raw_data", tname(p));
        else if (p->raw_data.len != ot_packed_size(dt, numel))
            s = ot_error(OTTER_ERR_INVALID, "tensor '%s': raw_data has %zu bytes but dims need %zu (%zu %s elements)",
                         tname(p), p->raw_data.len, ot_packed_size(dt, numel), numel, otter_dtype_name(dt));
        else if (numel && ot_dtype_packed(dt)) {
            if ((s = ot_tensor_alloc_data(t)) == OTTER_OK) ot_unpack_elems(dt, p->raw_data.data, numel, t->data);
        } else if (numel) {
            /* Take over protobuf-c's copy of the bytes (allocated through otter's hook, malloc-aligned)
             * instead of copying a third time. */
            t->data = p->raw_data.data;
            t->owns_data = true;
            p->raw_data.data = NULL;
            p->raw_data.len = 0;
        }
    } else {
        t->extra->storage = OTTER_STORAGE_TYPED;
        size_t count;
        const char *field;
        typed_source(p, dt, &count, &field);
        size_t need = ot_dtype_packed(dt) ? ot_packed_size(dt, numel) : numel; /* packed: one byte per int32 */
        if (count != need) {
            s = ot_error(OTTER_ERR_INVALID, "tensor '%s': %s holds %zu values but dims need %zu (%zu %s elements)",
                         tname(p), field, count, need, numel, otter_dtype_name(dt));
        } else if ((s = ot_tensor_alloc_data(t)) != OTTER_OK) {
        } else if (dt == OTTER_DTYPE_STRING) {
            otter_bytes *dst = t->data;
            for (size_t i = 0; i < numel && s == OTTER_OK; i++) s = bytes_from_pb(&dst[i], &p->string_data[i]);
        } else if (numel) {
            s = copy_typed(t, p, count);
        }
    }
    if (s == OTTER_OK) return OTTER_OK;
fail:
    otter_tensor_free(t);
    *out = NULL;
    return s;
}

otter_status ot_tensor_from_proto(otter_tensor **out, Onnx__TensorProto *p, const char *base_dir) {
    return tensor_from_proto(out, p, base_dir);
}

/* ---- reading: types, values, attributes, nodes, graphs ------------------------------------ */

static otter_status type_from_proto(otter_type *t, const Onnx__TypeProto *p);

static otter_status shape_from_proto(otter_type *t, const Onnx__TensorShapeProto *shape) {
    t->rank = -1;
    if (!shape) return OTTER_OK;
    if (shape->n_dim > 0 && !(t->dims = ot_calloc(shape->n_dim, sizeof *t->dims))) return OT_NOMEM();
    t->rank = 0;
    for (size_t i = 0; i < shape->n_dim; i++, t->rank++) {
        const Onnx__TensorShapeProto__Dimension *d = shape->dim[i];
        otter_dim *o = &t->dims[i];
        o->value = d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE ? d->dim_value : -1;
        if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM)
            OT_TRY(dup_field(&o->param, d->dim_param ? d->dim_param : ""));
        OT_TRY(dup_field(&o->denotation, d->denotation));
    }
    return OTTER_OK;
}

static otter_status sub_type(otter_type *t, const Onnx__TypeProto *elem) {
    if (!elem) return OTTER_OK;
    if (!(t->elem = ot_calloc(1, sizeof *t->elem))) return OT_NOMEM();
    t->elem->rank = -1;
    return type_from_proto(t->elem, elem);
}

static otter_status type_from_proto(otter_type *t, const Onnx__TypeProto *p) {
    memset(t, 0, sizeof *t);
    t->rank = -1;
    OT_TRY(dup_field(&t->denotation, p->denotation));
    OT_TRY(keep_unknown(&t->extra, &p->base));
    switch (p->value_case) {
    case ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE:
        t->kind = OTTER_TYPE_TENSOR;
        t->has_elem_type = p->tensor_type->has_elem_type;
        t->elem_type = (otter_dtype)p->tensor_type->elem_type;
        return shape_from_proto(t, p->tensor_type->shape);
    case ONNX__TYPE_PROTO__VALUE_SPARSE_TENSOR_TYPE:
        t->kind = OTTER_TYPE_SPARSE_TENSOR;
        t->has_elem_type = p->sparse_tensor_type->has_elem_type;
        t->elem_type = (otter_dtype)p->sparse_tensor_type->elem_type;
        return shape_from_proto(t, p->sparse_tensor_type->shape);
    case ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE:
        t->kind = OTTER_TYPE_SEQUENCE;
        return sub_type(t, p->sequence_type->elem_type);
    case ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE:
        t->kind = OTTER_TYPE_OPTIONAL;
        return sub_type(t, p->optional_type->elem_type);
    case ONNX__TYPE_PROTO__VALUE_MAP_TYPE:
        t->kind = OTTER_TYPE_MAP;
        t->has_elem_type = p->map_type->has_key_type;
        t->elem_type = (otter_dtype)p->map_type->key_type;
        return sub_type(t, p->map_type->value_type);
    default:
        return OTTER_OK;
    }
}

static otter_status value_from_proto(otter_value *v, const Onnx__ValueInfoProto *p) {
    memset(v, 0, sizeof *v);
    v->type.rank = -1;
    OT_TRY(dup_field(&v->name, p->name));
    OT_TRY(dup_field(&v->doc_string, p->doc_string));
    OT_TRY(keep_unknown(&v->extra, &p->base));
    OT_TRY(KEEP_UNMODELED(&v->extra, &p->base, value_unmodeled));
    if (p->type) {
        v->has_type = true;
        OT_TRY(type_from_proto(&v->type, p->type));
    }
    return OTTER_OK;
}

static otter_status graph_from_proto(otter_graph **out, const Onnx__GraphProto *p, const char *base_dir);

static otter_status attr_from_proto(otter_attr *a, const Onnx__AttributeProto *p, const char *base_dir) {
    memset(a, 0, sizeof *a);
    OT_TRY(dup_field(&a->name, p->name));
    OT_TRY(dup_field(&a->ref_attr_name, p->ref_attr_name));
    OT_TRY(dup_field(&a->doc_string, p->doc_string));
    OT_TRY(keep_unknown(&a->extra, &p->base));
    a->has_type = p->has_type;
    a->type = (otter_attr_type)p->type;
    a->has_f = p->has_f;
    a->f = p->f;
    a->has_i = p->has_i;
    a->i = p->i;
    a->has_s = p->has_s;
    if (p->has_s) OT_TRY(bytes_from_pb(&a->s, &p->s));
    if (p->t) OT_TRY(tensor_from_proto(&a->t, p->t, base_dir));
    if (p->g) OT_TRY(graph_from_proto(&a->g, p->g, base_dir));
    if (p->n_floats) {
        if (!(a->floats = ot_calloc(p->n_floats, sizeof(float)))) return OT_NOMEM();
        memcpy(a->floats, p->floats, p->n_floats * sizeof(float));
        a->n_floats = p->n_floats;
    }
    if (p->n_ints) {
        if (!(a->ints = ot_calloc(p->n_ints, sizeof(int64_t)))) return OT_NOMEM();
        memcpy(a->ints, p->ints, p->n_ints * sizeof(int64_t));
        a->n_ints = p->n_ints;
    }
    if (p->n_strings) {
        if (!(a->strings = ot_calloc(p->n_strings, sizeof *a->strings))) return OT_NOMEM();
        for (; a->n_strings < p->n_strings; a->n_strings++)
            OT_TRY(bytes_from_pb(&a->strings[a->n_strings], &p->strings[a->n_strings]));
    }
    if (p->n_tensors) {
        if (!(a->tensors = ot_calloc(p->n_tensors, sizeof *a->tensors))) return OT_NOMEM();
        for (; a->n_tensors < p->n_tensors; a->n_tensors++)
            OT_TRY(tensor_from_proto(&a->tensors[a->n_tensors], p->tensors[a->n_tensors], base_dir));
    }
    if (p->n_graphs) {
        if (!(a->graphs = ot_calloc(p->n_graphs, sizeof *a->graphs))) return OT_NOMEM();
        for (; a->n_graphs < p->n_graphs; a->n_graphs++)
            OT_TRY(graph_from_proto(&a->graphs[a->n_graphs], p->graphs[a->n_graphs], base_dir));
    }
    if (p->sparse_tensor) OT_TRY(pack_opaque(&a->sparse_tensor, &p->sparse_tensor->base));
    if (p->tp) OT_TRY(pack_opaque(&a->tp, &p->tp->base));
    OT_TRY(pack_opaque_array(&a->sparse_tensors, &a->n_sparse_tensors, (ProtobufCMessage *const *)p->sparse_tensors,
                             p->n_sparse_tensors));
    OT_TRY(pack_opaque_array(&a->type_protos, &a->n_type_protos, (ProtobufCMessage *const *)p->type_protos,
                             p->n_type_protos));
    return OTTER_OK;
}

static otter_status node_from_proto(otter_node **out, const Onnx__NodeProto *p, const char *base_dir) {
    *out = NULL;
    otter_node *n = ot_calloc(1, sizeof *n);
    if (!n) return OT_NOMEM();
    otter_status s = OTTER_OK;
#define STEP(expr)                                                                                                     \
    if (s == OTTER_OK) s = (expr)
    STEP(dup_field(&n->name, p->name));
    STEP(dup_field(&n->op_type, p->op_type));
    STEP(dup_field(&n->domain, p->domain));
    STEP(dup_field(&n->doc_string, p->doc_string));
    STEP(dup_field(&n->overload, p->overload));
    STEP(keep_unknown(&n->extra, &p->base));
    STEP(KEEP_UNMODELED(&n->extra, &p->base, node_unmodeled));
    if (s == OTTER_OK && p->n_input) {
        if (!(n->inputs = ot_calloc(p->n_input, sizeof *n->inputs))) s = OT_NOMEM();
        for (; s == OTTER_OK && n->n_inputs < p->n_input; n->n_inputs++)
            s = dup_field(&n->inputs[n->n_inputs], p->input[n->n_inputs] ? p->input[n->n_inputs] : "");
    }
    if (s == OTTER_OK && p->n_output) {
        if (!(n->outputs = ot_calloc(p->n_output, sizeof *n->outputs))) s = OT_NOMEM();
        for (; s == OTTER_OK && n->n_outputs < p->n_output; n->n_outputs++)
            s = dup_field(&n->outputs[n->n_outputs], p->output[n->n_outputs] ? p->output[n->n_outputs] : "");
    }
    if (s == OTTER_OK && p->n_attribute) {
        if (!(n->attrs = ot_calloc(p->n_attribute, sizeof *n->attrs))) s = OT_NOMEM();
        for (; s == OTTER_OK && n->n_attrs < p->n_attribute; n->n_attrs++)
            s = attr_from_proto(&n->attrs[n->n_attrs], p->attribute[n->n_attrs], base_dir);
    }
#undef STEP
    if (s != OTTER_OK) {
        otter_node_free(n);
        return ot_error_context(s, "node '%s' (%s): ", p->name ? p->name : "", p->op_type ? p->op_type : "?");
    }
    *out = n;
    return OTTER_OK;
}

static otter_status values_from_proto(otter_value **dst, size_t *n_dst, size_t *cap, Onnx__ValueInfoProto **src,
                                      size_t n) {
    if (!n) return OTTER_OK;
    OT_TRY(ot_grow((void **)dst, cap, n, sizeof **dst));
    for (; *n_dst < n; (*n_dst)++) {
        otter_status s = value_from_proto(&(*dst)[*n_dst], src[*n_dst]);
        if (s != OTTER_OK) {
            (*n_dst)++; /* the graph frees the partial value */
            return s;
        }
    }
    return OTTER_OK;
}

static otter_status graph_fill(otter_graph *g, const Onnx__GraphProto *p, const char *base_dir) {
    OT_TRY(dup_field(&g->doc_string, p->doc_string));
    OT_TRY(keep_unknown(&g->extra, &p->base));
    OT_TRY(KEEP_UNMODELED(&g->extra, &p->base, graph_unmodeled));
    if (p->n_node) {
        OT_TRY(ot_grow((void **)&g->nodes, &g->cap_nodes, p->n_node, sizeof *g->nodes));
        for (; g->n_nodes < p->n_node; g->n_nodes++)
            OT_TRY(node_from_proto(&g->nodes[g->n_nodes], p->node[g->n_nodes], base_dir));
    }
    if (p->n_initializer) {
        OT_TRY(ot_grow((void **)&g->initializers, &g->cap_initializers, p->n_initializer, sizeof *g->initializers));
        for (; g->n_initializers < p->n_initializer; g->n_initializers++) {
            otter_status s =
                tensor_from_proto(&g->initializers[g->n_initializers], p->initializer[g->n_initializers], base_dir);
            if (s != OTTER_OK) return ot_error_context(s, "initializer %zu: ", g->n_initializers);
        }
    }
    OT_TRY(values_from_proto(&g->inputs, &g->n_inputs, &g->cap_inputs, p->input, p->n_input));
    OT_TRY(values_from_proto(&g->outputs, &g->n_outputs, &g->cap_outputs, p->output, p->n_output));
    OT_TRY(values_from_proto(&g->value_info, &g->n_value_info, &g->cap_value_info, p->value_info, p->n_value_info));
    OT_TRY(pack_opaque_array(&g->sparse_initializers, &g->n_sparse_initializers,
                             (ProtobufCMessage *const *)p->sparse_initializer, p->n_sparse_initializer));
    OT_TRY(pack_opaque_array(&g->quantization_annotations, &g->n_quantization_annotations,
                             (ProtobufCMessage *const *)p->quantization_annotation, p->n_quantization_annotation));
    return OTTER_OK;
}

static otter_status graph_from_proto(otter_graph **out, const Onnx__GraphProto *p, const char *base_dir) {
    *out = ot_calloc(1, sizeof **out);
    if (!*out) return OT_NOMEM();
    otter_status s = dup_field(&(*out)->name, p->name);
    if (s == OTTER_OK) s = graph_fill(*out, p, base_dir);
    if (s != OTTER_OK) {
        otter_graph_free(*out);
        *out = NULL;
        if (p->name && p->name[0]) ot_error_context(s, "graph '%s': ", p->name);
    }
    return s;
}

static otter_status model_from_proto(otter_model **out, const Onnx__ModelProto *p, const char *base_dir) {
    otter_model *m = ot_calloc(1, sizeof *m);
    if (!m) return OT_NOMEM();
    m->has_ir_version = p->has_ir_version;
    m->ir_version = p->ir_version;
    m->has_model_version = p->has_model_version;
    m->model_version = p->model_version;
    otter_status s = OTTER_OK;
#define STEP(expr)                                                                                                     \
    if (s == OTTER_OK) s = (expr)
    STEP(dup_field(&m->producer_name, p->producer_name));
    STEP(dup_field(&m->producer_version, p->producer_version));
    STEP(dup_field(&m->domain, p->domain));
    STEP(dup_field(&m->doc_string, p->doc_string));
    STEP(dup_field(&m->base_dir, base_dir));
    STEP(keep_unknown(&m->extra, &p->base));
    STEP(KEEP_UNMODELED(&m->extra, &p->base, model_unmodeled));
    if (s == OTTER_OK && p->n_opset_import) {
        if (!(m->opsets = ot_calloc(p->n_opset_import, sizeof *m->opsets))) s = OT_NOMEM();
        for (; s == OTTER_OK && m->n_opsets < p->n_opset_import; m->n_opsets++) {
            const Onnx__OperatorSetIdProto *o = p->opset_import[m->n_opsets];
            otter_opset *d = &m->opsets[m->n_opsets];
            d->version = o->version;
            d->has_version = o->has_version;
            s = dup_field(&d->domain, o->domain);
            if (s == OTTER_OK) s = keep_unknown(&d->extra, &o->base);
        }
    }
    if (s == OTTER_OK && p->n_metadata_props) {
        if (!(m->metadata = ot_calloc(p->n_metadata_props, sizeof *m->metadata))) s = OT_NOMEM();
        for (; s == OTTER_OK && m->n_metadata < p->n_metadata_props; m->n_metadata++) {
            const Onnx__StringStringEntryProto *kv = p->metadata_props[m->n_metadata];
            s = dup_field(&m->metadata[m->n_metadata].key, kv->key);
            if (s == OTTER_OK) s = dup_field(&m->metadata[m->n_metadata].value, kv->value);
        }
    }
    if (p->graph) STEP(graph_from_proto(&m->graph, p->graph, base_dir));
    STEP(pack_opaque_array(&m->training_info, &m->n_training_info, (ProtobufCMessage *const *)p->training_info,
                           p->n_training_info));
    STEP(pack_opaque_array(&m->functions, &m->n_functions, (ProtobufCMessage *const *)p->functions, p->n_functions));
#undef STEP
    if (s == OTTER_OK && !m->graph) s = ot_error(OTTER_ERR_INVALID, "the model has no graph");
    if (s != OTTER_OK) {
        otter_model_free(m);
        return s;
    }
    *out = m;
    return OTTER_OK;
}

/* ---- model-local functions ---------------------------------------------------------------- */

/* Names as graph inputs or outputs without a type, as a FunctionProto gives them. */
static otter_status names_as_values(otter_value **dst, size_t *n_dst, size_t *cap, char *const *names, size_t n) {
    if (!n) return OTTER_OK;
    OT_TRY(ot_grow((void **)dst, cap, n, sizeof **dst));
    for (; *n_dst < n; (*n_dst)++) {
        otter_value *v = &(*dst)[*n_dst];
        memset(v, 0, sizeof *v);
        v->type.rank = -1;
        OT_TRY(dup_field(&v->name, names[*n_dst] ? names[*n_dst] : ""));
    }
    return OTTER_OK;
}

static otter_status function_fill(otter_model *m, const Onnx__FunctionProto *p) {
    OT_TRY(dup_field(&m->domain, p->domain ? p->domain : ""));
    if (p->n_opset_import) {
        if (!(m->opsets = ot_calloc(p->n_opset_import, sizeof *m->opsets))) return OT_NOMEM();
        for (; m->n_opsets < p->n_opset_import; m->n_opsets++) {
            const Onnx__OperatorSetIdProto *o = p->opset_import[m->n_opsets];
            m->opsets[m->n_opsets].version = o->version;
            m->opsets[m->n_opsets].has_version = o->has_version;
            OT_TRY(dup_field(&m->opsets[m->n_opsets].domain, o->domain));
        }
    }
    otter_graph *g = m->graph = ot_calloc(1, sizeof *g);
    if (!g) return OT_NOMEM();
    OT_TRY(dup_field(&g->name, p->name ? p->name : ""));
    OT_TRY(names_as_values(&g->inputs, &g->n_inputs, &g->cap_inputs, p->input, p->n_input));
    OT_TRY(names_as_values(&g->outputs, &g->n_outputs, &g->cap_outputs, p->output, p->n_output));
    OT_TRY(values_from_proto(&g->value_info, &g->n_value_info, &g->cap_value_info, p->value_info, p->n_value_info));
    if (p->n_node) {
        OT_TRY(ot_grow((void **)&g->nodes, &g->cap_nodes, p->n_node, sizeof *g->nodes));
        for (; g->n_nodes < p->n_node; g->n_nodes++)
            OT_TRY(node_from_proto(&g->nodes[g->n_nodes], p->node[g->n_nodes], NULL));
    }
    return OTTER_OK;
}

otter_status ot_function_as_model(const otter_bytes *function, otter_model **out) {
    *out = NULL;
    OT_TRY(ot_pb_check_depth(&onnx__function_proto__descriptor, function->data, function->len));
    pb_alloc_failed = false;
    Onnx__FunctionProto *p =
        onnx__function_proto__unpack(&ot_protobuf_allocator, function->len, (const uint8_t *)function->data);
    if (!p)
        return pb_alloc_failed ? OT_NOMEM()
                               : ot_error(OTTER_ERR_INVALID, "invalid protobuf: a FunctionProto does not decode");
    otter_model *m = ot_calloc(1, sizeof *m);
    otter_status s = m ? function_fill(m, p) : OT_NOMEM();
    onnx__function_proto__free_unpacked(p, &ot_protobuf_allocator);
    if (s != OTTER_OK) {
        otter_model_free(m);
        return s;
    }
    *out = m;
    return OTTER_OK;
}

otter_status otter_model_load_from_memory(otter_model **out, const void *data, size_t size, const char *base_dir) {
    *out = NULL;
    if (size == 0) return ot_error(OTTER_ERR_INVALID, "empty input: not an ONNX model");
    otter_status s = ot_pb_check_depth(&onnx__model_proto__descriptor, data, size);
    if (s != OTTER_OK) return ot_error_context(s, "not a valid ONNX model: ");
    pb_alloc_failed = false;
    Onnx__ModelProto *p = onnx__model_proto__unpack(&ot_protobuf_allocator, size, data);
    if (!p && pb_alloc_failed) return ot_error(OTTER_ERR_NOMEM, "out of memory decoding a %zu-byte model", size);
    if (!p)
        return ot_error(OTTER_ERR_INVALID,
                        "not a valid ONNX model: protobuf decoding of %zu bytes failed (truncated or corrupt file, "
                        "or wrong wire type)",
                        size);
    /* Data files from another save than the model's are refused before any tensor is read. */
    const size_t prefix = strlen(OT_EXTERNAL_GENERATION_KEY);
    for (size_t i = 0; s == OTTER_OK && base_dir && i < p->n_metadata_props; i++) {
        const Onnx__StringStringEntryProto *kv = p->metadata_props[i];
        if (kv->key && kv->value && strncmp(kv->key, OT_EXTERNAL_GENERATION_KEY, prefix) == 0)
            s = ot_external_check_generation(base_dir, kv->key + prefix, kv->value);
    }
    if (s == OTTER_OK) s = model_from_proto(out, p, base_dir);
    onnx__model_proto__free_unpacked(p, &ot_protobuf_allocator);
    return s;
}

otter_status otter_model_load(otter_model **out, const char *path) {
    *out = NULL;
    const void *data;
    size_t size;
    bool mapped;
    OT_TRY(ot_map_file(path, &data, &size, &mapped));
    char *dir = ot_dirname(path);
    otter_status s = dir ? otter_model_load_from_memory(out, data, size, dir) : OT_NOMEM();
    ot_free(dir);
    ot_unmap_file(data, size, mapped);
    if (s != OTTER_OK) ot_error_context(s, "%s: ", path);
    return s;
}
