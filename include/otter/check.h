/* otter: the model checker, mirroring onnx.checker.check_model.
 *
 * What it checks (see src/check/checker.c for the details):
 *  - model: ir_version present and at most 13 (ONNX 1.23; newer models are refused, as onnx does);
 *    opset imports (the default domain imported, no domain twice; an opset newer than the schemas
 *    is checked against the newest ones, with a warning); model-local functions named, each
 *    (domain, name, overload) defined once, their bodies checked like graphs against the
 *    function's own opset imports;
 *  - graph: names present where required; every tensor defined once (graph inputs, initializers,
 *    node outputs); every node input defined before use (topological order; subgraphs see the
 *    outer scope); graph inputs and outputs typed; initializers consistent (element count vs dims);
 *  - nodes: operator known for the model's opset and domain (schemas of ONNX 1.23, see
 *    src/check/schema.h), or a model-local function (a node with an overload must call one);
 *    attribute names and types; required attributes present; input and
 *    output counts within the schema's bounds; input element types against the schema's type
 *    constraints when they are known; subgraph attributes (If, Loop, Scan) recursively;
 *  - with full_check: static shape inference too (otter_model_infer_shapes), whose type and shape
 *    conflicts become problems.
 *
 * Where it departs from onnx (tests/checker_differences.txt lists the corpus cases):
 *  - stricter: a domain imported twice is refused (onnx silently uses the last entry); tensor
 *    data that does not match its dims is refused already by the loader;
 *  - more accepting: LayerNormalization in the default domain below opset 17, as ONNX Runtime
 *    registers it (its training artifacts use it at opset 14);
 *  - not checked: onnx's habit of ignoring inference errors that follow a node without a schema is
 *    not copied.
 *
 * Usage:
 *     otter_check_report *r = NULL;
 *     otter_check_report_create(&r);
 *     otter_check_options o = {.full_check = true, .report = r};
 *     if (otter_model_check(m, &o) != OTTER_OK)
 *         for (size_t i = 0; i < otter_check_report_count(r); i++)
 *             printf("%s\n", otter_check_report_message(r, i));
 *     otter_check_report_free(r);
 *
 * Messages name the node (name and op_type) or tensor at fault, e.g.
 *     node 'conv1' (Conv): attribute 'kernel_shape' has type FLOAT, expected INTS
 * Problems inside a subgraph are prefixed with the path to it:
 *     node 'loop' (Loop), attribute 'body': node 'add' (Add): input 'x' is not defined */
#ifndef OTTER_CHECK_H
#define OTTER_CHECK_H

#include <stdbool.h>
#include <stddef.h>

#include "otter/ir.h"
#include "otter/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A list of the problems one check found (in the order found). Reusable: each
 * otter_model_check call clears it first. */
typedef struct otter_check_report otter_check_report;

OTTER_API otter_status otter_check_report_create(otter_check_report **out);
OTTER_API void otter_check_report_free(otter_check_report *r);
OTTER_API void otter_check_report_clear(otter_check_report *r);
OTTER_API size_t otter_check_report_count(const otter_check_report *r);
/* The i-th problem as one line of text (NULL when i is out of range). Valid until the report is
 * cleared or freed. */
OTTER_API const char *otter_check_report_message(const otter_check_report *r, size_t i);
/* Name and op_type of the node at fault ("" when the problem is not about a node, or for an
 * unnamed node); NULL when i is out of range. */
OTTER_API const char *otter_check_report_node(const otter_check_report *r, size_t i);
OTTER_API const char *otter_check_report_op_type(const otter_check_report *r, size_t i);

/* Called for every problem as it is found (message as in the report). */
typedef void (*otter_check_fn)(const char *message, void *user);

typedef struct otter_check_options {
    /* Also run static shape inference and report its conflicts (onnx's full_check=True). */
    bool full_check;
    /* Stop at the first problem instead of collecting all of them. */
    bool stop_at_first;
    /* Optional: receives every problem found. */
    otter_check_report *report;
    /* Optional: called for every problem found. */
    otter_check_fn callback;
    void *callback_user;
} otter_check_options;

/* Check a model. opts may be NULL (no shape inference, collect all problems, no report).
 * Returns OTTER_OK when the model is valid; OTTER_ERR_INVALID when a problem was found, with
 * otter_last_error() holding the first problem (and the count of further ones);
 * OTTER_ERR_NOMEM / OTTER_ERR_ARGUMENT for failures of the check itself. The model is not
 * changed (full_check infers shapes on a private copy). */
OTTER_API otter_status otter_model_check(const otter_model *m, const otter_check_options *opts);

#ifdef __cplusplus
}
#endif
#endif
