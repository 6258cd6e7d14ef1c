/* otter: gradients of ONNX graphs, as ONNX graphs.
 *
 * otter_model_add_gradients rewrites a model in place: after the forward nodes it appends nodes
 * computing d(loss)/d(x) for each requested tensor x, named "<x>_grad" as ONNX Runtime names them.
 * The emitted nodes are standard ONNX operators, plus the com.microsoft gradient operators that
 * ONNX Runtime's training runtime uses (ReluGrad, SoftmaxCrossEntropyLossGrad, ConvGrad, ...), so
 * the result runs in ORT's training runtime and in otter.
 *
 * Only what the loss needs is differentiated: gradients stop at integer tensors and at tensors
 * that don't lead to the loss; a tensor read by several nodes gets the sum of its parts;
 * broadcasting is undone with ReduceSum. An operator without a gradient rule between a requested
 * tensor and the loss is an error naming the node, and the model is left unchanged. */
#ifndef OTTER_AUTODIFF_H
#define OTTER_AUTODIFF_H

#include <stddef.h>

#include "otter/ir.h"
#include "otter/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct otter_grad_options {
    const char *loss; /* a scalar float tensor of the graph */
    size_t n_wrt;     /* tensors to differentiate (graph inputs or initializers) */
    const char *const *wrt;
} otter_grad_options;

/* On success the graph computes "<wrt[i]>_grad" for every i (zeros when the loss doesn't depend
 * on it) and holds the scalar initializer "<loss>_grad" = 1 that seeds the backward pass.
 * m->graph is replaced by the rewritten graph: pointers into the old one are no longer valid. */
OTTER_API otter_status otter_model_add_gradients(otter_model *m, const otter_grad_options *opts);

/* Whether otter has a gradient rule for an operator. */
OTTER_API int otter_has_gradient_rule(const char *domain, const char *op_type);

#ifdef __cplusplus
}
#endif
#endif
