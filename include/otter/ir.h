/* otter: the in-memory model (graph, nodes, values, attributes, opsets) and its editing API.
 *
 * The structs are open so tools (checker, runtime, autodiff) can walk them; change them through
 * the functions below so ownership stays right. All strings are owned, NUL-terminated copies;
 * a NULL string field means "absent" (protobuf presence), "" means present and empty. */
#ifndef OTTER_IR_H
#define OTTER_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "otter/status.h"
#include "otter/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct otter_proto_extra;
typedef struct otter_graph otter_graph;

/* ---- types ------------------------------------------------------------------------------ */

typedef enum otter_type_kind {
    OTTER_TYPE_NONE = 0, /* no type given */
    OTTER_TYPE_TENSOR,
    OTTER_TYPE_SEQUENCE,
    OTTER_TYPE_MAP,
    OTTER_TYPE_OPTIONAL,
    OTTER_TYPE_SPARSE_TENSOR
} otter_type_kind;

/* One dimension: a fixed size (value >= 0), a symbol (param != NULL) or unknown (neither). */
typedef struct otter_dim {
    int64_t value; /* -1 when not a fixed size */
    char *param;
    char *denotation;
} otter_dim;

typedef struct otter_type {
    otter_type_kind kind;
    otter_dtype elem_type; /* TENSOR, SPARSE_TENSOR; map key type for MAP */
    bool has_elem_type;
    int rank; /* -1: shape not given (unknown rank) */
    otter_dim *dims;
    struct otter_type *elem; /* SEQUENCE / OPTIONAL element, MAP value type */
    char *denotation;
    struct otter_proto_extra *extra;
} otter_type;

/* ---- attributes --------------------------------------------------------------------------- */

/* Numbered as ONNX's AttributeProto.AttributeType. */
typedef enum otter_attr_type {
    OTTER_ATTR_UNDEFINED = 0,
    OTTER_ATTR_FLOAT = 1,
    OTTER_ATTR_INT = 2,
    OTTER_ATTR_STRING = 3,
    OTTER_ATTR_TENSOR = 4,
    OTTER_ATTR_GRAPH = 5,
    OTTER_ATTR_FLOATS = 6,
    OTTER_ATTR_INTS = 7,
    OTTER_ATTR_STRINGS = 8,
    OTTER_ATTR_TENSORS = 9,
    OTTER_ATTR_GRAPHS = 10,
    OTTER_ATTR_SPARSE_TENSOR = 11,
    OTTER_ATTR_SPARSE_TENSORS = 12,
    OTTER_ATTR_TYPE_PROTO = 13,
    OTTER_ATTR_TYPE_PROTOS = 14
} otter_attr_type;

OTTER_API const char *otter_attr_type_name(otter_attr_type t);

/* Mirrors AttributeProto field by field (so a round trip is exact); `type` says which one matters. */
typedef struct otter_attr {
    char *name;
    char *ref_attr_name;
    char *doc_string;
    otter_attr_type type;
    bool has_type, has_f, has_i, has_s;
    float f;
    int64_t i;
    otter_bytes s;
    otter_tensor *t;
    otter_graph *g;
    size_t n_floats, n_ints, n_strings, n_tensors, n_graphs;
    float *floats;
    int64_t *ints;
    otter_bytes *strings;
    otter_tensor **tensors;
    otter_graph **graphs;
    /* Sparse tensors and type protos are kept as serialized protobuf bytes. */
    otter_bytes sparse_tensor; /* data NULL when absent */
    otter_bytes tp;            /* data NULL when absent */
    size_t n_sparse_tensors, n_type_protos;
    otter_bytes *sparse_tensors;
    otter_bytes *type_protos;
    struct otter_proto_extra *extra;
} otter_attr;

/* ---- nodes, values, graphs, models -------------------------------------------------------- */

typedef struct otter_node {
    char *name;
    char *op_type;
    char *domain; /* NULL or "" is the default domain ai.onnx */
    /* Which of the model-local functions named (domain, op_type) the node calls (IR >= 10); NULL: none given. */
    char *overload;
    char *doc_string;
    size_t n_inputs, n_outputs, n_attrs;
    char **inputs; /* "" marks an omitted optional input */
    char **outputs;
    otter_attr *attrs;
    struct otter_proto_extra *extra;
} otter_node;

typedef struct otter_value {
    char *name;
    otter_type type; /* kind NONE when the ValueInfo has no type */
    bool has_type;
    char *doc_string;
    struct otter_proto_extra *extra;
} otter_value;

struct otter_graph {
    char *name;
    char *doc_string;
    size_t n_nodes, n_inputs, n_outputs, n_value_info, n_initializers;
    otter_node **nodes;
    otter_value *inputs;
    otter_value *outputs;
    otter_value *value_info;
    otter_tensor **initializers;
    /* Parts otter keeps as serialized protobuf bytes (it does not edit them). */
    size_t n_sparse_initializers, n_quantization_annotations;
    otter_bytes *sparse_initializers;
    otter_bytes *quantization_annotations;
    struct otter_proto_extra *extra;
    /* capacities of the growable arrays above */
    size_t cap_nodes, cap_inputs, cap_outputs, cap_value_info, cap_initializers;
};

typedef struct otter_opset {
    char *domain; /* "" or NULL: ai.onnx */
    int64_t version;
    bool has_version;
    struct otter_proto_extra *extra;
} otter_opset;

typedef struct otter_kv {
    char *key;
    char *value;
} otter_kv;

typedef struct otter_model {
    bool has_ir_version, has_model_version;
    int64_t ir_version;
    int64_t model_version;
    char *producer_name, *producer_version, *domain, *doc_string;
    size_t n_opsets, n_metadata;
    otter_opset *opsets;
    otter_kv *metadata;
    otter_graph *graph;
    /* Training info and model-local functions, kept as serialized protobuf bytes. */
    size_t n_training_info, n_functions;
    otter_bytes *training_info;
    otter_bytes *functions;
    struct otter_proto_extra *extra;
    /* Folder the model was loaded from, for resolving external data (NULL: current folder). */
    char *base_dir;
} otter_model;

/* ---- building and editing ----------------------------------------------------------------- */

/* New model with ir_version 8 and the given default-domain opset; an empty graph named `graph_name`. */
OTTER_API otter_status otter_model_create(otter_model **out, const char *graph_name, int64_t opset);
OTTER_API void otter_model_free(otter_model *m);
OTTER_API otter_status otter_model_clone(otter_model **out, const otter_model *m);
/* Opset version imported for a domain ("" / NULL / "ai.onnx" = default); 0 when not imported. */
OTTER_API int64_t otter_model_opset(const otter_model *m, const char *domain);
/* Add or change the version imported for a domain. */
OTTER_API otter_status otter_model_set_opset(otter_model *m, const char *domain, int64_t version);
OTTER_API otter_status otter_model_set_metadata(otter_model *m, const char *key, const char *value);
/* The metadata_props value under key, or NULL. */
OTTER_API const char *otter_model_metadata(const otter_model *m, const char *key);

OTTER_API otter_status otter_graph_create(otter_graph **out, const char *name);
OTTER_API void otter_graph_free(otter_graph *g);
OTTER_API otter_status otter_graph_clone(otter_graph **out, const otter_graph *g);

/* Type helpers. */
OTTER_API void otter_type_init_tensor(otter_type *t, otter_dtype elem, int rank, const int64_t *dims);
/* dims given as values; a negative value becomes the symbol params[i] (or unknown when params is NULL). */
OTTER_API otter_status otter_type_set_tensor(otter_type *t, otter_dtype elem, int rank, const int64_t *dims,
                                             const char *const *params);
OTTER_API otter_status otter_type_copy(otter_type *dst, const otter_type *src);
OTTER_API void otter_type_clear(otter_type *t);
OTTER_API bool otter_type_equal(const otter_type *a, const otter_type *b);

/* Graph inputs / outputs / value_info. dims: see otter_type_set_tensor; rank -1: unknown shape. */
OTTER_API otter_status otter_graph_add_input(otter_graph *g, const char *name, otter_dtype dtype, int rank,
                                             const int64_t *dims, const char *const *params);
OTTER_API otter_status otter_graph_add_output(otter_graph *g, const char *name, otter_dtype dtype, int rank,
                                              const int64_t *dims, const char *const *params);
OTTER_API otter_status otter_graph_add_value_info(otter_graph *g, const char *name, const otter_type *type);
OTTER_API otter_status otter_graph_delete_input(otter_graph *g, const char *name);
OTTER_API otter_status otter_graph_delete_output(otter_graph *g, const char *name);
/* Change the type of an existing input or output. */
OTTER_API otter_status otter_graph_change_input(otter_graph *g, const char *name, otter_dtype dtype, int rank,
                                                const int64_t *dims, const char *const *params);
OTTER_API otter_status otter_graph_change_output(otter_graph *g, const char *name, otter_dtype dtype, int rank,
                                                 const int64_t *dims, const char *const *params);
/* Rename a tensor everywhere in the graph (inputs, outputs, nodes, initializers, value_info,
 * and subgraphs that read it from the outer scope). */
OTTER_API otter_status otter_graph_rename(otter_graph *g, const char *old_name, const char *new_name);

/* Initializers: the graph takes ownership of t, also on failure (t is then freed). */
OTTER_API otter_status otter_graph_add_initializer(otter_graph *g, otter_tensor *t);
OTTER_API otter_status otter_graph_delete_initializer(otter_graph *g, const char *name);
/* A Constant node producing a copy of t under `name`. */
OTTER_API otter_status otter_graph_add_constant(otter_graph *g, const char *name, const otter_tensor *t);

/* Nodes. otter_node_create makes a free-standing node; otter_graph_add_node appends it (the graph
 * takes ownership, and frees the node when it fails). inputs/outputs are arrays of n names ("" for an omitted optional
 * input). */
OTTER_API otter_status otter_node_create(otter_node **out, const char *op_type, const char *name, size_t n_inputs,
                                         const char *const *inputs, size_t n_outputs, const char *const *outputs);
OTTER_API otter_status otter_node_set_domain(otter_node *n, const char *domain);
OTTER_API otter_status otter_node_set_attr_int(otter_node *n, const char *name, int64_t v);
OTTER_API otter_status otter_node_set_attr_float(otter_node *n, const char *name, float v);
OTTER_API otter_status otter_node_set_attr_string(otter_node *n, const char *name, const char *v);
OTTER_API otter_status otter_node_set_attr_ints(otter_node *n, const char *name, size_t count, const int64_t *v);
OTTER_API otter_status otter_node_set_attr_floats(otter_node *n, const char *name, size_t count, const float *v);
OTTER_API otter_status otter_node_set_attr_strings(otter_node *n, const char *name, size_t count, const char *const *v);
/* Takes ownership of t / g. */
OTTER_API otter_status otter_node_set_attr_tensor(otter_node *n, const char *name, otter_tensor *t);
OTTER_API otter_status otter_node_set_attr_graph(otter_node *n, const char *name, otter_graph *g);
OTTER_API otter_status otter_node_set_input(otter_node *n, size_t index, const char *name);
OTTER_API otter_status otter_node_add_input(otter_node *n, const char *name);
OTTER_API void otter_node_free(otter_node *n);
OTTER_API otter_status otter_node_clone(otter_node **out, const otter_node *n);

OTTER_API otter_status otter_graph_add_node(otter_graph *g, otter_node *n);
/* Delete the node with this name (or, when unnamed, the one producing `name` as an output). */
OTTER_API otter_status otter_graph_delete_node(otter_graph *g, const char *name);

/* Lookups (NULL / -1 when absent). */
OTTER_API const otter_attr *otter_node_attr(const otter_node *n, const char *name);
OTTER_API otter_attr *otter_node_attr_mut(otter_node *n, const char *name);
OTTER_API int64_t otter_node_attr_int(const otter_node *n, const char *name, int64_t def);
OTTER_API float otter_node_attr_float(const otter_node *n, const char *name, float def);
/* The string value, or def when absent. */
OTTER_API const char *otter_node_attr_string(const otter_node *n, const char *name, const char *def);
OTTER_API ptrdiff_t otter_graph_find_input(const otter_graph *g, const char *name);
OTTER_API ptrdiff_t otter_graph_find_output(const otter_graph *g, const char *name);
OTTER_API ptrdiff_t otter_graph_find_initializer(const otter_graph *g, const char *name);
OTTER_API ptrdiff_t otter_graph_find_value_info(const otter_graph *g, const char *name);
/* The node that outputs `name`, or -1. */
OTTER_API ptrdiff_t otter_graph_find_producer(const otter_graph *g, const char *name);
OTTER_API ptrdiff_t otter_graph_find_node(const otter_graph *g, const char *node_name);
/* Declared type of a tensor from inputs, outputs or value_info; NULL when not declared there. */
OTTER_API const otter_type *otter_graph_value_type(const otter_graph *g, const char *name);

#ifdef __cplusplus
}
#endif
#endif
