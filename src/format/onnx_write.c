/* Writing: otter_model -> ModelProto and otter_tensor -> TensorProto. Transient protobuf-c structs,
 * built in an arena, borrow the IR's strings and tensor data (and the unknown fields reading kept);
 * they are packed and the arena is freed in one go. */
#include "format/onnx_proto.h"

#include <errno.h>
#include <string.h>

#include "core/core.h"
#include "core/float_formats.h"
#include "core/proto_extra.h"
#include "format/external_data.h"
#include "otter/io.h"

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

/* Unknown fields kept by the reader, written back as they were. */
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

/* ---- writing ------------------------------------------------------------------------------ */

typedef struct writer {
    arena a;
    ot_external_sink *sink;    /* NULL: everything inline */
    size_t external_threshold; /* tensors at least this big go to the sink */
    bool keep_external;        /* tensors read from external data go back to it */
    int64_t needed_ir;         /* lowest IR version that has every element type written */
} writer;

/* The IR version that introduced an element type (onnx.proto's Version enum). */
static int64_t ir_introducing(int32_t dtype) {
    if (dtype >= OTTER_DTYPE_UINT2) return 13;
    if (dtype == OTTER_DTYPE_FLOAT8E8M0) return 12;
    if (dtype == OTTER_DTYPE_FLOAT4E2M1) return 11;
    if (dtype >= OTTER_DTYPE_UINT4) return 10;
    if (dtype >= OTTER_DTYPE_FLOAT8E4M3FN) return 9;
    return 0;
}

static void note_dtype(writer *w, int32_t dtype) {
    int64_t ir = ir_introducing(dtype);
    if (ir > w->needed_ir) w->needed_ir = ir;
}

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
    default:
        if (ot_dtype_packed(t->dtype)) { /* 4- and 2-bit types: one packed byte per int32 */
            size_t bytes = ot_packed_size(t->dtype, n);
            uint8_t *packed = arena_array(&w->a, bytes, 1);
            p->n_int32_data = bytes;
            if (!packed || !(p->int32_data = arena_array(&w->a, bytes, sizeof(int32_t)))) break;
            ot_pack_elems(t->dtype, t->data, n, packed);
            for (size_t i = 0; i < bytes; i++) p->int32_data[i] = packed[i];
            break;
        }
        /* 8- and 16-bit types widen into int32_data */
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
            case OTTER_DTYPE_UINT16:
            case OTTER_DTYPE_FLOAT16:
            case OTTER_DTYPE_BFLOAT16:
                v = ((const uint16_t *)t->data)[i];
                break;
            default: /* uint8, bool, the float8 bit patterns */
                v = ((const uint8_t *)t->data)[i];
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
    note_dtype(w, p->data_type);
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
        snprintf(len, 24, "%zu", ot_packed_size(t->dtype, (size_t)otter_tensor_numel(t)));
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
    } else if (ot_dtype_packed(t->dtype)) {
        size_t n = (size_t)otter_tensor_numel(t);
        p->has_raw_data = true;
        p->raw_data.len = ot_packed_size(t->dtype, n);
        if ((p->raw_data.data = arena_array(&w->a, p->raw_data.len, 1)))
            ot_pack_elems(t->dtype, t->data, n, p->raw_data.data);
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
        note_dtype(w, tt->elem_type);
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
    p->overload = wstr(n->overload);
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
    /* Generations recorded by earlier saves are dropped: only this save's data file is current. */
    size_t n_meta = w->sink ? 1 : 0;
    if ((p->metadata_props = arena_array(&w->a, m->n_metadata + n_meta + 1, sizeof *p->metadata_props))) {
        for (size_t i = 0; i < m->n_metadata; i++)
            if (!m->metadata[i].key ||
                strncmp(m->metadata[i].key, OT_EXTERNAL_GENERATION_KEY, strlen(OT_EXTERNAL_GENERATION_KEY)) != 0)
                p->metadata_props[p->n_metadata_props++] = kv_proto(w, m->metadata[i].key, m->metadata[i].value);
        if (w->sink) {
            size_t n = strlen(OT_EXTERNAL_GENERATION_KEY) + strlen(w->sink->location) + 1;
            char *key = arena_alloc(&w->a, n);
            if (key) snprintf(key, n, "%s%s", OT_EXTERNAL_GENERATION_KEY, w->sink->location);
            p->metadata_props[p->n_metadata_props++] = kv_proto(w, key, w->sink->generation);
        }
    }
    if (m->graph) OT_TRY(graph_to_proto(w, &p->graph, m->graph));
    /* Models made in memory start at IR 8, which ONNX Runtime 1.19 and other older readers take; one holding a
     * newer element type is written at the IR version that introduced it, which readers of that type expect. */
    if (p->has_ir_version && p->ir_version < w->needed_ir) p->ir_version = w->needed_ir;
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

/* Packs the model into the (temporary) model file, then commits its external data under a name no
 * live model reads (see ot_external_sink), so the model's rename is the one step that switches both. */
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
    return c->w->sink ? ot_external_sink_commit(c->w->sink) : OTTER_OK;
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
    if (w.sink) ot_external_sink_close(w.sink, s == OTTER_OK);
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
