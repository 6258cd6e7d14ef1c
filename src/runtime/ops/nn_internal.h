/* Helpers the neural-network kernels share (nn_common.c). Everything computes in float: float
 * tensors directly, other float types (double, float16, bfloat16) and the integer types MaxPool
 * accepts are converted in and out. Spatial kernels treat 1-D and 2-D as 3-D with leading size-1
 * dimensions, so one im2col / pooling loop serves all. */
#ifndef OTTER_RUNTIME_OPS_NN_INTERNAL_H
#define OTTER_RUNTIME_OPS_NN_INTERNAL_H

#include <stdbool.h>

#include "runtime/op.h"
#include "runtime/ops/conv_depthwise.h"
#include "runtime/ops/conv_geom.h"

bool ot_nn_float_like(otter_dtype t);
/* ot_conv_geom_forward over X (N, C, spatial...); the kernel dims are in g->k already. */
otter_status ot_nn_geom_forward(const ot_kernel_ctx *ctx, const otter_tensor *x, ot_conv_geom *g, bool ceil_mode);
/* X present with rank min_rank .. 2 + OT_SP, else an error naming it. */
otter_status ot_nn_check_x(const ot_kernel_ctx *ctx, const otter_tensor *x, int min_rank);
/* The p of LpPool / GlobalLpPool: a float attribute in their version 1, an int from version 2. */
otter_status ot_nn_lp_pool_p(const ot_kernel_ctx *ctx, double *p);
/* MaxPool 2x2, stride 2, floor with Indices over planes of H x W, by the MaxPool kernel's loop
 * (nn_pool.c; com.otter FusedConv's pooled output in nn_conv.c). */
void ot_nn_maxpool_2x2_indices(const ot_kernel_ctx *ctx, const float *x, int64_t planes, int64_t H, int64_t W, float *y,
                               int64_t *ind);
/* MaxPool by a channel-block plan (conv_depthwise.h, plan->block channels a block) over `blocks` blocks of
 * channel-blocked x, each [H][W][block] of in_size positions, into y's of out_size (nn_pool.c; BlockedMaxPool,
 * and a FusedConv's fused pooling in nn_conv.c and conv_lanes.c). */
otter_status ot_nn_blocked_maxpool(ot_kernel_ctx *ctx, const ot_dw_plan *plan, const float *x, float *y, int64_t blocks,
                                   int64_t in_size, int64_t out_size);
/* Keys' cubic convolution weight at distance x with coefficient A (resize.c; Resize and GridSample). */
double ot_cubic_weight(double x, double A);

#endif
