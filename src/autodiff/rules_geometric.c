/* Gradient rules for the geometric operators: GridSample. ONNX Runtime's training runtime has no
 * gradient for them; each emits a com.otter gradient operator (runtime/ops/nn_sample.c) that follows
 * PyTorch's backward, so the forward node stays the standard operator. */
#include "autodiff/grad.h"
#include "core/core.h"

#define IN(i) (n->inputs[i])

/* GridSample(X, grid) -> Y: com.otter GridSampleGrad(dY, X, grid) -> dX, dgrid with GridSample's
 * attributes; both outputs always exist (the kernel computes them together), an unneeded one under
 * a scratch name. */
void ot_grad_gridsample(ot_grad *g, otter_node *n) {
    const char *outs[2];
    for (size_t i = 0; i < 2; i++) {
        outs[i] = ot_grad_dx(g, i);
        if (!outs[i]) outs[i] = ot_grad_tmp(g, i == 0 ? "unused_dX" : "unused_dgrid");
    }
    otter_node *x =
        ot_grad_emit(g, "GridSampleGrad", "com.otter", 3, (const char *[]){ot_grad_dy(g, 0), IN(0), IN(1)}, 2, outs);
    ot_grad_copy_attrs(g, x, n);
}
