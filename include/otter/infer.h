/* otter: static type and shape inference over the IR, like onnx.shape_inference.infer_shapes
 * with data_prop=True.
 *
 * Nodes are visited in order. Types and shapes come from graph inputs, initializers, Constant
 * nodes and declared value_info; each node's output element types and shapes are computed per
 * operator and opset version. Symbolic dimensions propagate (a dim with a param keeps it, an
 * unknown dim stays unknown). Small int64 tensors whose values are known (Constant, initializers,
 * Shape, Size, and Gather / Slice / Concat / Unsqueeze / Squeeze / arithmetic over them, Range,
 * ConstantOfShape) are propagated, so Reshape, Expand, Slice, Tile, ConstantOfShape, ... get
 * concrete output shapes.
 *
 * Results go to the graph's value_info (one entry per inferred intermediate tensor). A declared
 * type (graph output or existing value_info) is merged with the inferred one: unknown parts of
 * the declaration are filled in, known parts are kept, and a conflict (element type, rank or a
 * fixed dimension) is an error naming the node, operator and tensor. Graph inputs are never
 * changed. Subgraphs of If / Loop / Scan are inferred too (their value_info is written). */
#ifndef OTTER_INFER_H
#define OTTER_INFER_H

#include <stdbool.h>
#include <stddef.h>

#include "otter/ir.h"
#include "otter/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A zero-initialized struct (or NULL) gives the defaults. */
typedef struct otter_infer_options {
    /* Error on an operator otter has no inference rule for (default: its outputs stay unknown). */
    bool strict;
    /* Don't propagate known values of small int64 tensors (onnx's data_prop=False). */
    bool no_data_prop;
    /* Don't write inferred types to value_info / graph outputs: only check consistency. */
    bool check_only;
} otter_infer_options;

/* What one inference run found (optional output of the _ex variants). */
typedef struct otter_infer_stats {
    size_t n_nodes;          /* nodes visited, subgraphs included */
    size_t n_unknown_ops;    /* nodes whose operator has no rule here (outputs left unknown) */
    size_t n_outputs_typed;  /* node outputs given at least an element type */
    size_t n_outputs_shaped; /* node outputs given a rank (some dims may still be unknown) */
} otter_infer_stats;

/* Infer the main graph (and its subgraphs) using the model's opset imports. opts may be NULL. */
OTTER_API otter_status otter_model_infer_shapes(otter_model *m, const otter_infer_options *opts);
OTTER_API otter_status otter_model_infer_shapes_ex(otter_model *m, const otter_infer_options *opts,
                                                   otter_infer_stats *stats);

/* Infer one graph with the given opset imports (as in a ModelProto; a default-domain entry is
 * required for ai.onnx operators). stats may be NULL. */
OTTER_API otter_status otter_graph_infer_shapes(otter_graph *g, size_t n_opsets, const otter_opset *opsets,
                                                const otter_infer_options *opts, otter_infer_stats *stats);

#ifdef __cplusplus
}
#endif
#endif
