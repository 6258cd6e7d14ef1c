/* Graph fusions for the runtime (session opt_level >= 2).
 *
 * ot_fuse_model() returns a copy of the model's top-level graph in which chains of nodes whose
 * intermediate values have no other reader are replaced by one com.otter node that the kernels
 * run in one pass over the output:
 *
 *   Conv [-> BatchNormalization] [-> Add(per-channel bias)] [-> Add(Z)] [-> activation] [-> MaxPool 2x2/2]
 *       -> FusedConv(X, W, B, Z) {Conv's attributes, activation, activation_params, maxpool_2x2} -> Y
 *          [, MaxPool's Indices [, the unpooled shape: a Shape that was the unpooled value's other
 *          reader, as in a training graph's MaxPool gradient]]
 *   Gemm -> activation              -> FusedGemm(A, B, C) {Gemm's attributes, activation, activation_params}
 *   MatMul [-> Add(1-D bias)] [-> activation] -> FusedMatMul(A, B, bias) {activation, activation_params}
 *   MaxPool's gradient in standard ops (autodiff's ConstantOfShape(S) zeros, Reshapes to 1-D,
 *   ScatterElements of dY at MaxPool's Indices, Reshape to S)
 *                                   -> MaxPoolGrad(dY, Indices, S), the same sums in the same order
 *   that gradient -> ReluGrad(., X) for MaxPool's input X
 *                                   -> MaxPoolGrad(dY, Indices, S, Y) (Y: MaxPool's output), same bits
 *   Sum of com.microsoft SliceGrads of one shape (one value, or Shape nodes of one tensor), each read
 *   only by the Sum
 *                                   -> SlicesGrad(SliceGrad's inputs, then (dY, starts, ends, axes, steps)
 *                                      of each other part): dX written once, parts copied when they tile it
 *   the gradient of Softmax(Qs Kt) V autodiff writes: dP = FusedMatMul(dY, V, transB) [-> Identity],
 *   SoftmaxGrad_13(dP, P) read by FusedMatMul(., Kt, transB) and FusedMatMul(Qs, ., transA) [, and
 *   FusedMatMul(P, dY, transA)]  -> AttentionCoreGrad(dY, V, P, Kt, Qs) -> dQs, dKt[, dV]: a batch's
 *                                      scores in cache from dP to dS, the same bits
 *   Dropout with a constant ratio of 0, and the com.microsoft DropoutGrads (ratio 0) that are all the
 *   readers of its mask           -> Identity (the session's aliases), same bits
 *
 * The activation (runtime/ops/fused_act.h) is Relu, Clip with constant bounds (initializers or Constant
 * nodes), LeakyRelu, HardSigmoid, HardSwish, Sigmoid, Gelu (either approximation), or, after a Conv,
 * Swish: a Sigmoid and a Mul of the value by the Sigmoid's output, both its only readers. After a Gemm
 * or MatMul whose weights are not a float32 initializer, only Relu (the output may not be float). The
 * MaxPool follows only Relu or no activation. A value read by anything else (a gradient, in a
 * training graph) stops the chain before it.
 *
 * BatchNormalization (inference, one output) is folded into new Conv weights and bias, which
 * needs constant parameters: it is done only when fold_initializers is set and the Conv's W / B
 * and the BN's four inputs are initializers that are not also graph inputs. Results equal the
 * unfused graph's up to the rounding of the folded weights and the order of the float additions
 * (bias, then sum input); piecewise activations are exact, Sigmoid and Swish within an FMA rounding.
 * Sums (Add) are fused only for float32 (the Conv's weight or the bias is a float32 initializer or
 * declared input).
 *
 * The copy shares the original initializers' data (views): keep the model alive as long as the
 * copy. *out is NULL when nothing was fused; *n_fused (may be NULL) counts the nodes removed. */
#ifndef OTTER_RUNTIME_FUSE_H
#define OTTER_RUNTIME_FUSE_H

#include <stdbool.h>
#include <stddef.h>

#include "otter/ir.h"
#include "otter/status.h"

otter_status ot_fuse_model(const otter_model *m, bool fold_initializers, otter_model **out, size_t *n_fused);

#endif
