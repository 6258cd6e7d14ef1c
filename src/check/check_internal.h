/* The checker's parts (src/check/): shared state and the functions one part calls in another.
 *
 *   checker.c      the entry point, model-level rules (ir_version, opset imports, metadata, local functions
 *                  and their bodies)
 *   check_graph.c  graph structure: names, scopes, definition before use, initializers, attributes, subgraphs
 *   check_node.c   nodes against their operator schemas (or the model-local function they call)
 *   check_types.c  full_check's type pass over declared and inferred types
 *   report.c       the report and how a problem is worded
 *   wire.c         fields read from the parts the IR keeps as serialized protobuf */
#ifndef OTTER_CHECK_CHECK_INTERNAL_H
#define OTTER_CHECK_CHECK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/strmap.h"
#include "otter/check.h"

/* The newest IR version otter reads and checks: ONNX 1.23's IR_VERSION. */
#define OT_CHECK_MAX_IR_VERSION 13

/* A model-local function, as nodes call it: (domain, name, overload). Strings live in the checker. */
typedef struct ot_check_function {
    const char *domain, *name, *overload;
} ot_check_function;

typedef struct ot_checker {
    const otter_model *m;
    const otter_check_options *opts;
    int64_t ir_version;
    /* Opset imports as onnx's checker sees them: domain strings taken literally, the last entry
     * for a domain wins. */
    size_t n_opsets;
    const char **opset_domains;
    int64_t *opset_versions;
    size_t n_functions;
    ot_check_function *functions;
    /* Path to the current subgraph ("node 'x' (Loop), attribute 'body': "), "" at the top. */
    char *prefix;
    size_t n_problems;
    char *first;
    otter_status fatal; /* a failure of the check itself (out of memory) */
    /* Strings built during the check (type strings, names read from serialized parts), freed at the end. */
    char **strings;
    size_t n_strings, cap_strings;
} ot_checker;

/* A graph's names, seeing its ancestors' (LexicalScopeContext). Name sets are ot_strmaps of borrowed
 * strings (the model outlives the check); in the type pass the value is the name's type string (NULL
 * when unknown). */
typedef struct ot_scope {
    const struct ot_scope *parent;
    ot_strmap names;
} ot_scope;

bool ot_scope_has_any(const ot_scope *s, const char *name);
const char *ot_scope_type(const ot_scope *s, const char *name);
const char *ot_scope_name_type(const ot_strmap *m, const char *key);

/* report.c */
bool ot_check_stopped(const ot_checker *c);
const char *ot_check_node_name(const otter_node *n);
/* Report a problem about node n (may be NULL; node_index names an unnamed node). */
void ot_check_problem(ot_checker *c, const otter_node *n, size_t node_index, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Shape inference names the node at fault in its message: fill the last report entry's node and op_type. */
void ot_check_name_node_from_message(otter_check_report *r);

/* checker.c */
bool ot_check_opset_lookup(const ot_checker *c, const char *domain, int64_t *version);
/* A copy of s that lives until the end of the check (NULL and c->fatal set when out of memory). */
const char *ot_check_keep_string(ot_checker *c, const char *s);
const char *ot_check_keep_bytes(ot_checker *c, const char *s, size_t len);
/* The model-local function a node calls, or NULL. */
const ot_check_function *ot_check_find_function(const ot_checker *c, const char *domain, const char *name,
                                                const char *overload);

/* check_graph.c */
const char *ot_check_kind_name(otter_type_kind k);
void ot_check_graph(ot_checker *c, const otter_graph *g, const ot_scope *parent, bool main_graph);
void ot_check_attribute(ot_checker *c, const otter_node *n, size_t ni, const otter_attr *a, const ot_scope *scope,
                        bool main_graph);

/* check_node.c */
bool ot_check_experimental_op(const char *op);
const char *ot_check_domain_label(const char *d);
void ot_check_node(ot_checker *c, const otter_node *n, size_t ni, const ot_scope *scope, bool main_graph);

/* check_types.c */
void ot_check_type_graph(ot_checker *c, const otter_graph *g, const ot_scope *parent);

/* wire.c */
/* The name of a sparse initializer (ot_free it; NULL when it has none or out of memory) and the
 * element type of its values (UNDEFINED when absent). */
char *ot_check_sparse_initializer_name(const otter_bytes *b, otter_dtype *dtype);
/* One string field of a serialized message (the last occurrence): *out points into b. */
bool ot_check_wire_string(const otter_bytes *b, uint64_t field, const char **out, size_t *len);

#endif
