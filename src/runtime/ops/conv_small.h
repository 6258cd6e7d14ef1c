/* Convolutions of small maps over a batch (conv_small.c): the forward convolution and its input
 * and weight gradients as sums over the (output position, input position, tap) triples that lie
 * inside the maps, so the taps that fall in the padding cost nothing. */
#ifndef OTTER_RUNTIME_OPS_CONV_SMALL_H
#define OTTER_RUNTIME_OPS_CONV_SMALL_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/op.h"
#include "runtime/ops/im2col.h"

typedef enum { OT_CONV_SMALL_FORWARD, OT_CONV_SMALL_INPUT_GRAD, OT_CONV_SMALL_WEIGHT_GRAD } ot_conv_small_pass;

/* Whether this path runs that pass of a convolution of window w (one group, C -> M channels, N
 * images) on this CPU and pays off: AVX2 or AVX-512, at least 16 images and 16 channels each side, small
 * maps (conv_small.c has the rule and its measurements). */
bool ot_conv_small_pays_off(const ot_conv_window *w, int64_t N, int64_t C, int64_t M, ot_conv_small_pass pass);

/* Y[N][M][out] = conv(X[N][C][in], W[M][C][taps]) without bias, over window w (one group). */
otter_status ot_conv_small_forward(ot_kernel_ctx *ctx, const ot_conv_window *w, int64_t N, int64_t C, int64_t M,
                                   const float *X, const float *W, float *Y);

/* DX[N][C][in] = the gradient of that convolution's input for DY[N][M][out] (overwritten). */
otter_status ot_conv_small_input_grad(ot_kernel_ctx *ctx, const ot_conv_window *w, int64_t N, int64_t C, int64_t M,
                                      const float *DY, const float *W, float *DX);

/* DW[M][C][taps] = the gradient of that convolution's weights for DY and X (overwritten). */
otter_status ot_conv_small_weight_grad(ot_kernel_ctx *ctx, const ot_conv_window *w, int64_t N, int64_t C, int64_t M,
                                       const float *DY, const float *X, float *DW);

#endif
