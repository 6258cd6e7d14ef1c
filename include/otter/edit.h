/* otter: graph-level editing tools over the IR (include/otter/ir.h): clean, topological sort,
 * merge, concat, extract, name prefixing and the list of data types.
 *
 * Tools that make a new model (merge, concat, extract) never change the models they read and give
 * nothing on failure; in-place tools (topo sort, clean, prefix) say below what a failure leaves.
 * Failures set otter_last_error() naming the node or tensor at fault. */
#ifndef OTTER_EDIT_H
#define OTTER_EDIT_H

#include <stdbool.h>
#include <stddef.h>

#include "otter/ir.h"
#include "otter/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every defined element type (UNDEFINED excluded), in ONNX's numbering; *count gets the length.
 * Names come from otter_dtype_name(). */
OTTER_API const otter_dtype *otter_dtype_list(size_t *count);

/* Order nodes so every node comes after the producers of its inputs (including names its subgraphs
 * read from the outer scope); the order is otherwise kept (a sorted graph stays as it is). Subgraphs
 * are sorted too. A cycle is an OTTER_ERR_INVALID naming the nodes on it; the graph is unchanged. */
OTTER_API otter_status otter_graph_topo_sort(otter_graph *g);

typedef struct otter_clean_stats {
    size_t nodes_removed;             /* nodes no graph output depends on */
    size_t initializers_deduplicated; /* initializers equal to an earlier one (readers rewired) */
    size_t initializers_removed;      /* initializers nobody reads (after deduplication) */
    size_t value_info_removed;        /* value_info of tensors no node produces */
} otter_clean_stats;

/* Tidy a graph in place (and its subgraphs):
 *  1. drop nodes whose outputs no graph output needs;
 *  2. sort topologically (a cycle is an error naming a node on it);
 *  3. deduplicate initializers with equal dtype, dims and bytes: readers of a duplicate read the
 *     first one instead (initializers that are also graph inputs or outputs are left alone);
 *  4. drop initializers nobody reads (unless they are graph inputs or outputs) and value_info of
 *     tensors no node produces.
 * stats may be NULL. A cycle is found before this graph's nodes change (subgraphs may already be
 * cleaned); after an out-of-memory failure the graph is valid to free but may be partly cleaned. */
OTTER_API otter_status otter_graph_clean(otter_graph *g, otter_clean_stats *stats);

/* Prefix every tensor name (inputs, outputs, initializers, value_info, node inputs and outputs,
 * subgraphs) and, when rename_nodes, every node name, with `prefix`. Empty names ("" = omitted
 * optional input) stay empty. After an out-of-memory failure some names may be prefixed already. */
OTTER_API otter_status otter_graph_add_prefix(otter_graph *g, const char *prefix, bool rename_nodes);

/* One connection of a merge: output `a_output` of the first graph feeds input `b_input` of the second
 * (names as in the models given, before any prefix). */
typedef struct otter_wire {
    const char *a_output;
    const char *b_input;
} otter_wire;

typedef struct otter_merge_options {
    const char *prefix_a;   /* prefix for every name of A (NULL or "": none) */
    const char *prefix_b;   /* same for B */
    bool keep_a_outputs;    /* also expose A's outputs that are not wired */
    const char *graph_name; /* NULL: "<A's graph name>_<B's graph name>" */
} otter_merge_options;

/* sclblonnx-style merge: a new model whose graph is A followed by B with each wire's A output
 * feeding the B input (B's input is renamed to the A output). Inputs: A's inputs, then B's inputs
 * not wired; outputs: B's outputs, then (keep_a_outputs) A's outputs not wired. Opset imports are the
 * highest version per domain, ir_version the highest of both. A wired pair must have compatible
 * types (same element type, same rank and equal fixed dims when both are known). An input with the
 * same name and type in both graphs becomes one shared input; any other name used by both graphs is
 * an error naming it (use a prefix). opts may be NULL (no prefixes, A's outputs dropped). */
OTTER_API otter_status otter_model_merge(otter_model **out, const otter_model *a, const otter_model *b,
                                         const otter_wire *wires, size_t n_wires, const otter_merge_options *opts);

/* Two graphs side by side, not connected: inputs A's then B's, outputs A's then B's. Names are
 * prefixed as given (NULL: none); clashes are handled as in otter_model_merge. */
OTTER_API otter_status otter_model_concat(otter_model **out, const otter_model *a, const otter_model *b,
                                          const char *prefix_a, const char *prefix_b);

/* The sub-graph computing `outputs` from `inputs` (tensor names of m's graph), like
 * onnx.utils.extract_model: nodes on a path from the inputs (or initializers) to the outputs, the
 * initializers they read, value_info of the tensors kept. Types of the new inputs and outputs come
 * from m's inputs, outputs, value_info and initializers (left untyped when m does not declare them).
 * An output that also needs a graph input not listed in `inputs` is an error naming both. */
OTTER_API otter_status otter_model_extract(otter_model **out, const otter_model *m, size_t n_inputs,
                                           const char *const *inputs, size_t n_outputs, const char *const *outputs);

#ifdef __cplusplus
}
#endif
#endif
