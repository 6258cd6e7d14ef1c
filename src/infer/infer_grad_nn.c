/* Shape inference for the gradient operators of runtime/ops/grad_nn.c and ResizeGrad. */
#include "infer/infer_internal.h"

/* (dY, forward inputs...) -> their gradients: output i has the shape and type of input i + 1
 * (ResizeGrad: dX like X; AttentionGrad: dQ, dK, dV like Q, K, V). */
otter_status ot_infer_grad_like_inputs(ot_inode *n) {
    for (size_t i = 0; i < n->n_out; i++) OT_TRY(ot_out_like(n, i, i + 1));
    return OTTER_OK;
}
