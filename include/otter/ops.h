/* otter: the operators otter supports, from its operator registry.
 *
 *     for (size_t i = 0; i < otter_ops_count(); i++) {
 *         otter_op_info op;
 *         otter_ops_get(i, &op);
 *         printf("%s %s kernel=%d\n", op.domain, op.op_type, op.kernel);
 *     }
 *
 * Everything returned points to static, read-only data: nothing to free, safe from any thread. */
#ifndef OTTER_OPS_H
#define OTTER_OPS_H

#include <stdbool.h>
#include <stddef.h>

#include "otter/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most since-versions one operator lists. */
#define OTTER_OP_MAX_VERSIONS 16

typedef struct otter_op_info {
    const char *domain; /* "ai.onnx" for the default domain, "com.microsoft", ... */
    const char *op_type;
    /* The operator's versions otter runs, ascending: ONNX's since-versions (otter's schemas are
     * ONNX 1.12's) from the oldest one otter's kernels cover, and the versions at which otter's
     * kernels start (ops without an ONNX schema have only those). A model importing the domain at
     * opset v uses the operator's latest version <= v. */
    int since_versions[OTTER_OP_MAX_VERSIONS];
    size_t n_since_versions;
    bool kernel;          /* a session can run it */
    bool shape_inference; /* otter_infer_shapes derives its output types and shapes */
    bool gradient;        /* otter_model_add_gradients differentiates through it */
    const char *note;     /* why it lacks a kernel or a shape rule, or how it is differentiated; or NULL */
} otter_op_info;

/* Number of operators in the registry, sorted by (domain, op_type) with the default domain first. */
OTTER_API size_t otter_ops_count(void);
/* Operator index (< otter_ops_count()) into *out; OTTER_ERR_ARGUMENT when out of range. */
OTTER_API otter_status otter_ops_get(size_t index, otter_op_info *out);

#ifdef __cplusplus
}
#endif
#endif
