/* otter: text and Graphviz DOT renderings of a model or graph.
 *
 * The library never prints: each call builds a NUL-terminated string allocated with the library's
 * allocator (free it with otter_free) that the caller writes where it likes. */
#ifndef OTTER_PRINT_H
#define OTTER_PRINT_H

#include <stdbool.h>
#include <stddef.h>

#include "otter/ir.h"
#include "otter/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A readable text form like onnx.helper.printable_graph:
 *
 *   graph main (
 *     %input: float32[batch,784]
 *   ) initializers (
 *     %fc1.weight: float32[200,784]
 *   ) {
 *     %h1 = Gemm[transB = 1](%input, %fc1.weight, %fc1.bias)    # fc1
 *     ...
 *     return %output: float32[batch,10]
 *   }
 *
 * Attributes are shown with their values (tensors by type, and their values when small); subgraphs
 * of If/Loop/Scan are printed nested under their node. */
OTTER_API otter_status otter_graph_to_text(const otter_graph *g, char **out);
/* The model header (ir_version, opset imports, producer, metadata) followed by the graph. */
OTTER_API otter_status otter_model_to_text(const otter_model *m, char **out);

/* A type as text: "float32[batch,784]", "seq(float32[?])", "?" when absent. */
OTTER_API otter_status otter_type_to_text(const otter_type *t, char **out);

typedef struct otter_dot_options {
    bool hide_initializers; /* do not draw initializers (they are listed in the reading node) */
    const char *rankdir;    /* "TB" (default) or "LR" */
} otter_dot_options;

/* Graphviz DOT: nodes as boxes with op type and name; tensors as edges labelled with their name and
 * type when declared (inputs, outputs, value_info); graph inputs, outputs and initializers drawn as
 * distinct shapes. opts may be NULL. */
OTTER_API otter_status otter_graph_to_dot(const otter_graph *g, const otter_dot_options *opts, char **out);

#ifdef __cplusplus
}
#endif
#endif
