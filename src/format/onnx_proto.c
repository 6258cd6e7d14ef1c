/* ModelProto <-> otter_model and TensorProto <-> otter_tensor.
 *
 * Reading copies every field otter knows into its IR and keeps unknown fields as raw bytes, so
 * writing back produces a model that decodes equal to the original. Writing builds transient
 * protobuf-c structs from an arena that borrow the IR's strings and tensor data, packs them and
 * frees the arena in one go. */
#include "format/onnx_proto.h"

#include <errno.h>
#include <string.h>

#include "core/core.h"
#include "format/external_data.h"
#include "core/proto_extra.h"
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

/* Bump arena for the transient structs built while writing. */
typedef struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    max_align_t data[];
} arena_block;
typedef struct arena {
    arena_block *head;
    bool failed;
} arena;

static void *arena_alloc(arena *a, size_t n) {
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (!a->head || a->head->cap - a->head->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        arena_block *b = ot_malloc(sizeof *b + cap);
        if (!b) {
            a->failed = true;
            return NULL;
        }
        b->next = a->head;
        b->used = 0;
        b->cap = cap;
        a->head = b;
    }
    void *p = (char *)a->head->data + a->head->used;
    a->head->used += n;
    memset(p, 0, n);
    return p;
}
static void *arena_array(arena *a, size_t count, size_t size) {
    size_t n;
    if (!ot_mul_size(count, size, &n)) {
        a->failed = true;
        return NULL;
    }
    return count ? arena_alloc(a, n) : NULL;
}
static void arena_free(arena *a) {
    while (a->head) {
        arena_block *next = a->head->next;
        ot_free(a->head);
        a->head = next;
    }
}
static void *arena_pb_alloc(void *data, size_t size) { return arena_alloc(data, size); }
static void arena_pb_free(void *data, void *p) {
    (void)data;
    (void)p;
}

/* ---- unknown fields ----------------------------------------------------------------------- */

static otter_status keep_unknown(struct otter_proto_extra **extra, const ProtobufCMessage *m) {
    if (!m->n_unknown_fields) return OTTER_OK;
    /* protobuf-c accepts field number 0 (an over-long key), which no encoder may write: refuse it
     * rather than keep bytes that can't be written back. */
    for (size_t i = 0; i < m->n_unknown_fields; i++)
        if (m->unknown_fields[i].tag == 0)
            return ot_error(OTTER_ERR_INVALID, "invalid protobuf: a field numbered 0 in %s", m->descriptor->name);
    if (!*extra && !(*extra = ot_proto_extra_new())) return OT_NOMEM();
    struct otter_proto_extra *e = *extra;
    if (!(e->unknown = ot_calloc(m->n_unknown_fields, sizeof *e->unknown))) return OT_NOMEM();
    for (; e->n_unknown < m->n_unknown_fields; e->n_unknown++) {
        const ProtobufCMessageUnknownField *u = &m->unknown_fields[e->n_unknown];
        ot_unknown_field *d = &e->unknown[e->n_unknown];
        d->tag = u->tag;
        d->wire_type = (int)u->wire_type;
        d->len = u->len;
        if (!(d->data = ot_malloc(u->len))) return OT_NOMEM();
        if (u->len) memcpy(d->data, u->data, u->len);
    }
    return OTTER_OK;
}

static void put_unknown(ProtobufCMessage *m, const struct otter_proto_extra *e, arena *a) {
    if (!e || !e->n_unknown) return;
    ProtobufCMessageUnknownField *u = arena_array(a, e->n_unknown, sizeof *u);
    if (!u) return;
    for (size_t i = 0; i < e->n_unknown; i++) {
        u[i].tag = e->unknown[i].tag;
        u[i].wire_type = (ProtobufCWireType)e->unknown[i].wire_type;
        u[i].len = e->unknown[i].len;
        u[i].data = e->unknown[i].data;
    }
    m->n_unknown_fields = (unsigned)e->n_unknown;
    m->unknown_fields = u;
}

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

static void copy_typed(otter_tensor *t, const Onnx__TensorProto *p, size_t n) {
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
        for (size_t i = 0; i < n; i++) ((uint8_t *)t->data)[i] = (uint8_t)p->int32_data[i];
        break;
    case OTTER_DTYPE_BOOL:
        for (size_t i = 0; i < n; i++) ((uint8_t *)t->data)[i] = p->int32_data[i] != 0;
        break;
    default:
        OT_ASSERT(0);
    }
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
    return keep_unknown(&t->extra, &p->base);
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
        else if (p->raw_data.len != otter_tensor_nbytes(t))
            s = ot_error(OTTER_ERR_INVALID, "tensor '%s': raw_data has %zu bytes but dims need %zu (%zu %s elements)",
                         tname(p), p->raw_data.len, otter_tensor_nbytes(t), numel, otter_dtype_name(dt));
        else if (numel) {
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
        if (count != numel) {
            s = ot_error(OTTER_ERR_INVALID, "tensor '%s': %s holds %zu elements but dims need %zu", tname(p), field,
                         count, numel);
        } else if ((s = ot_tensor_alloc_data(t)) != OTTER_OK) {
        } else if (dt == OTTER_DTYPE_STRING) {
            otter_bytes *dst = t->data;
            for (size_t i = 0; i < numel && s == OTTER_OK; i++) s = bytes_from_pb(&dst[i], &p->string_data[i]);
        } else if (numel) {
            copy_typed(t, p, numel);
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
    STEP(keep_unknown(&n->extra, &p->base));
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

otter_status otter_model_load_from_memory(otter_model **out, const void *data, size_t size, const char *base_dir) {
    *out = NULL;
    if (size == 0) return ot_error(OTTER_ERR_INVALID, "empty input: not an ONNX model");
    pb_alloc_failed = false;
    Onnx__ModelProto *p = onnx__model_proto__unpack(&ot_protobuf_allocator, size, data);
    if (!p && pb_alloc_failed) return ot_error(OTTER_ERR_NOMEM, "out of memory decoding a %zu-byte model", size);
    if (!p)
        return ot_error(OTTER_ERR_INVALID,
                        "not a valid ONNX model: protobuf decoding of %zu bytes failed (truncated or corrupt file, "
                        "or wrong wire type)",
                        size);
    otter_status s = model_from_proto(out, p, base_dir);
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

/* ---- writing ------------------------------------------------------------------------------ */

typedef struct writer {
    arena a;
    ot_external_sink *sink;    /* NULL: everything inline */
    size_t external_threshold; /* tensors at least this big go to the sink */
    bool keep_external;        /* tensors read from external data go back to it */
} writer;

static char *wstr(const char *s) { return (char *)s; } /* protobuf-c wants char*; it never writes */

static ProtobufCBinaryData wbytes(const otter_bytes *b) { return (ProtobufCBinaryData){b->len, (uint8_t *)b->data}; }

/* Opaque bytes were checked to decode when they were read (pack_opaque). */
static void *unpack_opaque(writer *w, const ProtobufCMessageDescriptor *d, const otter_bytes *b) {
    ProtobufCAllocator al = {arena_pb_alloc, arena_pb_free, &w->a};
    ProtobufCMessage *m = protobuf_c_message_unpack(d, &al, b->len, (const uint8_t *)b->data);
    if (!m) w->a.failed = true;
    return m;
}

static void **unpack_opaque_array(writer *w, const ProtobufCMessageDescriptor *d, const otter_bytes *b, size_t n) {
    void **arr = arena_array(&w->a, n, sizeof *arr);
    for (size_t i = 0; arr && i < n; i++) arr[i] = unpack_opaque(w, d, &b[i]);
    return arr;
}

static void typed_to_proto(writer *w, Onnx__TensorProto *p, const otter_tensor *t) {
    size_t n = (size_t)otter_tensor_numel(t);
    switch (t->dtype) {
    case OTTER_DTYPE_FLOAT:
    case OTTER_DTYPE_COMPLEX64:
        p->n_float_data = t->dtype == OTTER_DTYPE_FLOAT ? n : 2 * n;
        p->float_data = t->data;
        break;
    case OTTER_DTYPE_DOUBLE:
    case OTTER_DTYPE_COMPLEX128:
        p->n_double_data = t->dtype == OTTER_DTYPE_DOUBLE ? n : 2 * n;
        p->double_data = t->data;
        break;
    case OTTER_DTYPE_INT64:
        p->n_int64_data = n;
        p->int64_data = t->data;
        break;
    case OTTER_DTYPE_UINT64:
        p->n_uint64_data = n;
        p->uint64_data = t->data;
        break;
    case OTTER_DTYPE_UINT32:
        p->n_uint64_data = n;
        if ((p->uint64_data = arena_array(&w->a, n, sizeof(uint64_t))))
            for (size_t i = 0; i < n; i++) p->uint64_data[i] = ((const uint32_t *)t->data)[i];
        break;
    case OTTER_DTYPE_STRING:
        p->n_string_data = n;
        if ((p->string_data = arena_array(&w->a, n, sizeof *p->string_data)))
            for (size_t i = 0; i < n; i++) p->string_data[i] = wbytes(&((const otter_bytes *)t->data)[i]);
        break;
    case OTTER_DTYPE_INT32:
        p->n_int32_data = n;
        p->int32_data = t->data;
        break;
    default: /* 8- and 16-bit types widen into int32_data */
        p->n_int32_data = n;
        if (!(p->int32_data = arena_array(&w->a, n, sizeof(int32_t)))) break;
        for (size_t i = 0; i < n; i++) {
            int32_t v;
            switch (t->dtype) {
            case OTTER_DTYPE_INT8:
                v = ((const int8_t *)t->data)[i];
                break;
            case OTTER_DTYPE_INT16:
                v = ((const int16_t *)t->data)[i];
                break;
            case OTTER_DTYPE_UINT8:
            case OTTER_DTYPE_BOOL:
                v = ((const uint8_t *)t->data)[i];
                break;
            default:
                v = ((const uint16_t *)t->data)[i];
                break;
            }
            p->int32_data[i] = v;
        }
    }
}

static Onnx__StringStringEntryProto *kv_proto(writer *w, const char *k, const char *v) {
    Onnx__StringStringEntryProto *e = arena_alloc(&w->a, sizeof *e);
    if (!e) return NULL;
    onnx__string_string_entry_proto__init(e);
    e->key = wstr(k);
    e->value = wstr(v);
    return e;
}

static otter_status tensor_to_proto(writer *w, Onnx__TensorProto **out, const otter_tensor *t) {
    Onnx__TensorProto *p = *out = arena_alloc(&w->a, sizeof *p);
    if (!p) return OT_NOMEM();
    onnx__tensor_proto__init(p);
    const struct otter_proto_extra *e = t->extra;
    p->name = wstr(t->name);
    p->has_data_type = e ? e->has_data_type : true;
    p->data_type = (int32_t)t->dtype;
    p->n_dims = (size_t)t->rank;
    p->dims = (int64_t *)t->dims;
    if (e) {
        p->doc_string = wstr(e->doc_string);
        if (e->has_segment && (p->segment = arena_alloc(&w->a, sizeof *p->segment))) {
            onnx__tensor_proto__segment__init(p->segment);
            p->segment->has_begin = e->has_segment_begin;
            p->segment->begin = e->segment_begin;
            p->segment->has_end = e->has_segment_end;
            p->segment->end = e->segment_end;
        }
        put_unknown(&p->base, e, &w->a);
    }
    otter_tensor_storage storage = e ? e->storage : OTTER_STORAGE_RAW;
    size_t nbytes = otter_tensor_nbytes(t);
    bool external = w->sink && t->dtype != OTTER_DTYPE_STRING &&
                    ((storage == OTTER_STORAGE_EXTERNAL && w->keep_external) ||
                     (w->external_threshold && nbytes >= w->external_threshold));
    if (external) {
        uint64_t offset;
        OT_TRY(ot_external_append(w->sink, t, &offset));
        char *off = arena_alloc(&w->a, 24), *len = arena_alloc(&w->a, 24);
        if (!off || !len) return OT_NOMEM();
        snprintf(off, 24, "%llu", (unsigned long long)offset);
        snprintf(len, 24, "%zu", nbytes);
        p->n_external_data = 3;
        if (!(p->external_data = arena_array(&w->a, 3, sizeof *p->external_data))) return OT_NOMEM();
        p->external_data[0] = kv_proto(w, "location", w->sink->location);
        p->external_data[1] = kv_proto(w, "offset", off);
        p->external_data[2] = kv_proto(w, "length", len);
        p->has_data_location = true;
        p->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
        return w->a.failed ? OT_NOMEM() : OTTER_OK;
    }
    if (e && e->has_data_location && e->data_location != ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
        p->has_data_location = true;
        p->data_location = (Onnx__TensorProto__DataLocation)e->data_location;
    }
    if (storage == OTTER_STORAGE_TYPED || t->dtype == OTTER_DTYPE_STRING) {
        typed_to_proto(w, p, t);
    } else {
        p->has_raw_data = true;
        p->raw_data.len = nbytes;
        p->raw_data.data = t->data;
    }
    return w->a.failed ? OT_NOMEM() : OTTER_OK;
}

static Onnx__TypeProto *type_to_proto(writer *w, const otter_type *t);

static Onnx__TensorShapeProto *shape_to_proto(writer *w, const otter_type *t) {
    if (t->rank < 0) return NULL;
    Onnx__TensorShapeProto *s = arena_alloc(&w->a, sizeof *s);
    if (!s) return NULL;
    onnx__tensor_shape_proto__init(s);
    s->n_dim = (size_t)t->rank;
    if (!(s->dim = arena_array(&w->a, s->n_dim, sizeof *s->dim))) return s;
    for (size_t i = 0; i < s->n_dim; i++) {
        Onnx__TensorShapeProto__Dimension *d = s->dim[i] = arena_alloc(&w->a, sizeof *d);
        if (!d) return s;
        onnx__tensor_shape_proto__dimension__init(d);
        d->denotation = wstr(t->dims[i].denotation);
        if (t->dims[i].param) {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            d->dim_param = wstr(t->dims[i].param);
        } else if (t->dims[i].value >= 0) {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d->dim_value = t->dims[i].value;
        }
    }
    return s;
}

static Onnx__TypeProto *type_to_proto(writer *w, const otter_type *t) {
    Onnx__TypeProto *p = arena_alloc(&w->a, sizeof *p);
    if (!p) return NULL;
    onnx__type_proto__init(p);
    p->denotation = wstr(t->denotation);
    put_unknown(&p->base, t->extra, &w->a);
    switch (t->kind) {
    case OTTER_TYPE_TENSOR:
    case OTTER_TYPE_SPARSE_TENSOR: {
        /* Tensor and SparseTensor share their layout field for field. */
        Onnx__TypeProto__Tensor *tt = arena_alloc(&w->a, sizeof *tt);
        if (!tt) return p;
        if (t->kind == OTTER_TYPE_TENSOR) {
            onnx__type_proto__tensor__init(tt);
            p->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
            p->tensor_type = tt;
        } else {
            onnx__type_proto__sparse_tensor__init((Onnx__TypeProto__SparseTensor *)tt);
            p->value_case = ONNX__TYPE_PROTO__VALUE_SPARSE_TENSOR_TYPE;
            p->sparse_tensor_type = (Onnx__TypeProto__SparseTensor *)tt;
        }
        tt->has_elem_type = t->has_elem_type;
        tt->elem_type = (int32_t)t->elem_type;
        tt->shape = shape_to_proto(w, t);
        break;
    }
    case OTTER_TYPE_SEQUENCE:
        if ((p->sequence_type = arena_alloc(&w->a, sizeof *p->sequence_type))) {
            onnx__type_proto__sequence__init(p->sequence_type);
            p->value_case = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
            if (t->elem) p->sequence_type->elem_type = type_to_proto(w, t->elem);
        }
        break;
    case OTTER_TYPE_OPTIONAL:
        if ((p->optional_type = arena_alloc(&w->a, sizeof *p->optional_type))) {
            onnx__type_proto__optional__init(p->optional_type);
            p->value_case = ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE;
            if (t->elem) p->optional_type->elem_type = type_to_proto(w, t->elem);
        }
        break;
    case OTTER_TYPE_MAP:
        if ((p->map_type = arena_alloc(&w->a, sizeof *p->map_type))) {
            onnx__type_proto__map__init(p->map_type);
            p->value_case = ONNX__TYPE_PROTO__VALUE_MAP_TYPE;
            p->map_type->has_key_type = t->has_elem_type;
            p->map_type->key_type = (int32_t)t->elem_type;
            if (t->elem) p->map_type->value_type = type_to_proto(w, t->elem);
        }
        break;
    case OTTER_TYPE_NONE:
        break;
    }
    return p;
}

static Onnx__ValueInfoProto **values_to_proto(writer *w, const otter_value *v, size_t n) {
    Onnx__ValueInfoProto **arr = arena_array(&w->a, n, sizeof *arr);
    for (size_t i = 0; arr && i < n; i++) {
        Onnx__ValueInfoProto *p = arr[i] = arena_alloc(&w->a, sizeof *p);
        if (!p) break;
        onnx__value_info_proto__init(p);
        p->name = wstr(v[i].name);
        p->doc_string = wstr(v[i].doc_string);
        if (v[i].has_type) p->type = type_to_proto(w, &v[i].type);
        put_unknown(&p->base, v[i].extra, &w->a);
    }
    return arr;
}

static otter_status graph_to_proto(writer *w, Onnx__GraphProto **out, const otter_graph *g);

static otter_status attr_to_proto(writer *w, Onnx__AttributeProto **out, const otter_attr *a) {
    Onnx__AttributeProto *p = *out = arena_alloc(&w->a, sizeof *p);
    if (!p) return OT_NOMEM();
    onnx__attribute_proto__init(p);
    p->name = wstr(a->name);
    p->ref_attr_name = wstr(a->ref_attr_name);
    p->doc_string = wstr(a->doc_string);
    p->has_type = a->has_type;
    p->type = (Onnx__AttributeProto__AttributeType)a->type;
    p->has_f = a->has_f;
    p->f = a->f;
    p->has_i = a->has_i;
    p->i = a->i;
    p->has_s = a->has_s;
    if (a->has_s) p->s = wbytes(&a->s);
    if (a->t) OT_TRY(tensor_to_proto(w, &p->t, a->t));
    if (a->g) OT_TRY(graph_to_proto(w, &p->g, a->g));
    p->n_floats = a->n_floats;
    p->floats = a->floats;
    p->n_ints = a->n_ints;
    p->ints = a->ints;
    p->n_strings = a->n_strings;
    if (a->n_strings && (p->strings = arena_array(&w->a, a->n_strings, sizeof *p->strings)))
        for (size_t i = 0; i < a->n_strings; i++) p->strings[i] = wbytes(&a->strings[i]);
    if (a->n_tensors) {
        if (!(p->tensors = arena_array(&w->a, a->n_tensors, sizeof *p->tensors))) return OT_NOMEM();
        p->n_tensors = a->n_tensors;
        for (size_t i = 0; i < a->n_tensors; i++) OT_TRY(tensor_to_proto(w, &p->tensors[i], a->tensors[i]));
    }
    if (a->n_graphs) {
        if (!(p->graphs = arena_array(&w->a, a->n_graphs, sizeof *p->graphs))) return OT_NOMEM();
        p->n_graphs = a->n_graphs;
        for (size_t i = 0; i < a->n_graphs; i++) OT_TRY(graph_to_proto(w, &p->graphs[i], a->graphs[i]));
    }
    if (a->sparse_tensor.data)
        p->sparse_tensor = unpack_opaque(w, &onnx__sparse_tensor_proto__descriptor, &a->sparse_tensor);
    if (a->tp.data) p->tp = unpack_opaque(w, &onnx__type_proto__descriptor, &a->tp);
    p->n_sparse_tensors = a->n_sparse_tensors;
    p->sparse_tensors = (Onnx__SparseTensorProto **)unpack_opaque_array(w, &onnx__sparse_tensor_proto__descriptor,
                                                                        a->sparse_tensors, a->n_sparse_tensors);
    p->n_type_protos = a->n_type_protos;
    p->type_protos =
        (Onnx__TypeProto **)unpack_opaque_array(w, &onnx__type_proto__descriptor, a->type_protos, a->n_type_protos);
    put_unknown(&p->base, a->extra, &w->a);
    return w->a.failed ? OT_NOMEM() : OTTER_OK;
}

static otter_status node_to_proto(writer *w, Onnx__NodeProto **out, const otter_node *n) {
    Onnx__NodeProto *p = *out = arena_alloc(&w->a, sizeof *p);
    if (!p) return OT_NOMEM();
    onnx__node_proto__init(p);
    p->name = wstr(n->name);
    p->op_type = wstr(n->op_type);
    p->domain = wstr(n->domain);
    p->doc_string = wstr(n->doc_string);
    p->n_input = n->n_inputs;
    p->input = n->inputs;
    p->n_output = n->n_outputs;
    p->output = n->outputs;
    if (n->n_attrs) {
        if (!(p->attribute = arena_array(&w->a, n->n_attrs, sizeof *p->attribute))) return OT_NOMEM();
        p->n_attribute = n->n_attrs;
        for (size_t i = 0; i < n->n_attrs; i++) OT_TRY(attr_to_proto(w, &p->attribute[i], &n->attrs[i]));
    }
    put_unknown(&p->base, n->extra, &w->a);
    return OTTER_OK;
}

static otter_status graph_to_proto(writer *w, Onnx__GraphProto **out, const otter_graph *g) {
    Onnx__GraphProto *p = *out = arena_alloc(&w->a, sizeof *p);
    if (!p) return OT_NOMEM();
    onnx__graph_proto__init(p);
    p->name = wstr(g->name);
    p->doc_string = wstr(g->doc_string);
    if (g->n_nodes) {
        if (!(p->node = arena_array(&w->a, g->n_nodes, sizeof *p->node))) return OT_NOMEM();
        p->n_node = g->n_nodes;
        for (size_t i = 0; i < g->n_nodes; i++) OT_TRY(node_to_proto(w, &p->node[i], g->nodes[i]));
    }
    if (g->n_initializers) {
        if (!(p->initializer = arena_array(&w->a, g->n_initializers, sizeof *p->initializer))) return OT_NOMEM();
        p->n_initializer = g->n_initializers;
        for (size_t i = 0; i < g->n_initializers; i++)
            OT_TRY(tensor_to_proto(w, &p->initializer[i], g->initializers[i]));
    }
    p->n_input = g->n_inputs;
    p->input = values_to_proto(w, g->inputs, g->n_inputs);
    p->n_output = g->n_outputs;
    p->output = values_to_proto(w, g->outputs, g->n_outputs);
    p->n_value_info = g->n_value_info;
    p->value_info = values_to_proto(w, g->value_info, g->n_value_info);
    p->n_sparse_initializer = g->n_sparse_initializers;
    p->sparse_initializer = (Onnx__SparseTensorProto **)unpack_opaque_array(
        w, &onnx__sparse_tensor_proto__descriptor, g->sparse_initializers, g->n_sparse_initializers);
    p->n_quantization_annotation = g->n_quantization_annotations;
    p->quantization_annotation = (Onnx__TensorAnnotation **)unpack_opaque_array(
        w, &onnx__tensor_annotation__descriptor, g->quantization_annotations, g->n_quantization_annotations);
    put_unknown(&p->base, g->extra, &w->a);
    return w->a.failed ? OT_NOMEM() : OTTER_OK;
}

static otter_status model_to_proto(writer *w, Onnx__ModelProto **out, const otter_model *m) {
    Onnx__ModelProto *p = *out = arena_alloc(&w->a, sizeof *p);
    if (!p) return OT_NOMEM();
    onnx__model_proto__init(p);
    p->has_ir_version = m->has_ir_version;
    p->ir_version = m->ir_version;
    p->has_model_version = m->has_model_version;
    p->model_version = m->model_version;
    p->producer_name = wstr(m->producer_name);
    p->producer_version = wstr(m->producer_version);
    p->domain = wstr(m->domain);
    p->doc_string = wstr(m->doc_string);
    if (m->n_opsets && (p->opset_import = arena_array(&w->a, m->n_opsets, sizeof *p->opset_import))) {
        p->n_opset_import = m->n_opsets;
        for (size_t i = 0; i < m->n_opsets; i++) {
            Onnx__OperatorSetIdProto *o = p->opset_import[i] = arena_alloc(&w->a, sizeof *o);
            if (!o) return OT_NOMEM();
            onnx__operator_set_id_proto__init(o);
            o->domain = wstr(m->opsets[i].domain);
            o->has_version = m->opsets[i].has_version;
            o->version = m->opsets[i].version;
            put_unknown(&o->base, m->opsets[i].extra, &w->a);
        }
    }
    if (m->n_metadata && (p->metadata_props = arena_array(&w->a, m->n_metadata, sizeof *p->metadata_props))) {
        p->n_metadata_props = m->n_metadata;
        for (size_t i = 0; i < m->n_metadata; i++)
            p->metadata_props[i] = kv_proto(w, m->metadata[i].key, m->metadata[i].value);
    }
    if (m->graph) OT_TRY(graph_to_proto(w, &p->graph, m->graph));
    p->n_training_info = m->n_training_info;
    p->training_info = (Onnx__TrainingInfoProto **)unpack_opaque_array(w, &onnx__training_info_proto__descriptor,
                                                                       m->training_info, m->n_training_info);
    p->n_functions = m->n_functions;
    p->functions =
        (Onnx__FunctionProto **)unpack_opaque_array(w, &onnx__function_proto__descriptor, m->functions, m->n_functions);
    put_unknown(&p->base, m->extra, &w->a);
    return w->a.failed ? OT_NOMEM() : OTTER_OK;
}

/* Protobuf messages can't exceed 2 GiB. */
#define PROTOBUF_LIMIT ((size_t)INT32_MAX)

otter_status otter_model_save_to_memory(const otter_model *m, void **data, size_t *size) {
    *data = NULL;
    *size = 0;
    writer w = {0};
    Onnx__ModelProto *p;
    otter_status s = model_to_proto(&w, &p, m);
    if (s == OTTER_OK) {
        size_t n = protobuf_c_message_get_packed_size(&p->base);
        if (n > PROTOBUF_LIMIT)
            s = ot_error(OTTER_ERR_UNSUPPORTED,
                         "the model serializes to %zu bytes, over protobuf's 2 GiB limit: save it to a file "
                         "(large tensors then go to external data)",
                         n);
        else if (!(*data = ot_malloc(n)))
            s = OT_NOMEM();
        else
            *size = protobuf_c_message_pack(&p->base, *data);
    }
    arena_free(&w.a);
    return s;
}

/* Bytes of tensor data in a graph and its subgraphs (to decide whether external data is needed). */
static size_t graph_tensor_bytes(const otter_graph *g) {
    size_t total = 0;
    for (size_t i = 0; i < g->n_initializers; i++) total += otter_tensor_nbytes(g->initializers[i]);
    for (size_t i = 0; i < g->n_nodes; i++)
        for (size_t a = 0; a < g->nodes[i]->n_attrs; a++) {
            const otter_attr *at = &g->nodes[i]->attrs[a];
            if (at->t) total += otter_tensor_nbytes(at->t);
            if (at->g) total += graph_tensor_bytes(at->g);
            for (size_t k = 0; k < at->n_graphs; k++) total += graph_tensor_bytes(at->graphs[k]);
        }
    return total;
}

static bool graph_has_external(const otter_graph *g) {
    for (size_t i = 0; i < g->n_initializers; i++)
        if (g->initializers[i]->extra && g->initializers[i]->extra->storage == OTTER_STORAGE_EXTERNAL) return true;
    return false;
}

struct save_ctx {
    writer *w;
    const otter_model *m;
};

/* Packs the model into the (temporary) model file. External data is finished and renamed into
 * place before the model file is, so a crash never leaves a model pointing at missing data. */
static otter_status write_model(FILE *f, void *user) {
    struct save_ctx *c = user;
    Onnx__ModelProto *p;
    OT_TRY(model_to_proto(c->w, &p, c->m));
    size_t n = protobuf_c_message_get_packed_size(&p->base);
    if (n > PROTOBUF_LIMIT)
        return ot_error(OTTER_ERR_UNSUPPORTED, "the model is %zu bytes even with external data (limit 2 GiB)", n);
    uint8_t *buf = ot_malloc(n);
    if (!buf) return OT_NOMEM();
    size_t got = protobuf_c_message_pack(&p->base, buf);
    size_t wrote = fwrite(buf, 1, got, f);
    ot_free(buf);
    if (wrote != got) return ot_error(OTTER_ERR_IO, "write failed: %s", strerror(errno));
    if (c->w->sink) {
        ot_external_sink *sink = c->w->sink;
        c->w->sink = NULL;
        return ot_external_sink_close(sink, true);
    }
    return OTTER_OK;
}

otter_status otter_model_save(const otter_model *m, const char *path, const otter_save_options *opts) {
    otter_save_options o = opts ? *opts : (otter_save_options){0};
    writer w = {.external_threshold = o.external_threshold, .keep_external = !o.all_inline};
    if (o.all_inline) w.external_threshold = 0;
    /* Over protobuf's limit, tensors of 1 MiB and more move out even when not asked. */
    else if (!w.external_threshold && graph_tensor_bytes(m->graph) > PROTOBUF_LIMIT - (64u << 20))
        w.external_threshold = 1u << 20;
    ot_external_sink sink;
    if (w.external_threshold || (w.keep_external && graph_has_external(m->graph))) {
        OT_TRY(ot_external_sink_open(&sink, path, o.external_file));
        w.sink = &sink;
    }
    struct save_ctx c = {&w, m};
    otter_status s = ot_write_atomic_with(path, write_model, &c);
    if (w.sink) ot_external_sink_close(w.sink, false); /* failed before the data was finished */
    arena_free(&w.a);
    return s;
}

/* ---- single tensors (for .pb tensor files) ------------------------------------------------ */

otter_status ot_tensor_pack(const otter_tensor *t, void **data, size_t *size) {
    *data = NULL;
    *size = 0;
    writer w = {0};
    Onnx__TensorProto *p;
    otter_status s = tensor_to_proto(&w, &p, t);
    if (s == OTTER_OK) {
        size_t n = protobuf_c_message_get_packed_size(&p->base);
        if (n > PROTOBUF_LIMIT)
            s = ot_error(OTTER_ERR_UNSUPPORTED, "tensor '%s' is %zu bytes, over protobuf's 2 GiB limit",
                         t->name ? t->name : "", n);
        else if (!(*data = ot_malloc(n)))
            s = OT_NOMEM();
        else
            *size = protobuf_c_message_pack(&p->base, *data);
    }
    arena_free(&w.a);
    return s;
}
