/* Spatial geometry of convolutions and pools, shared by the kernels (nn.c) and their gradients
 * (training_nn.c): attributes read once, output sizes computed one way. 1-D and 2-D geometries are
 * widened to 3-D with leading size-1 dimensions (ot_conv_geom_to3). */
#ifndef OTTER_RUNTIME_OPS_CONV_GEOM_H
#define OTTER_RUNTIME_OPS_CONV_GEOM_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/op.h"
#include "runtime/ops/im2col.h"

#define OT_SP 3 /* spatial dims handled */

typedef struct ot_conv_geom {
    int nd; /* spatial dims of the op (1..3) */
    int64_t N, C;
    int64_t in[OT_SP], k[OT_SP], out[OT_SP], stride[OT_SP], dil[OT_SP], pb[OT_SP], pe[OT_SP], opad[OT_SP];
    int64_t in_size, k_size, out_size; /* after ot_conv_geom_to3 */
} ot_conv_geom;

/* Strides, dilations, pads and auto_pad of a forward conv / pool over g->in (g->nd and g->k set):
 * fills those and g->out (floor, or ceil_mode's rule). Errors name the axis. */
otter_status ot_conv_geom_forward(const ot_kernel_ctx *ctx, ot_conv_geom *g, bool ceil_mode);
/* The same from the attributes named with a prefix ("maxpool_strides", ...: a pooling fused into a
 * convolution), auto_pad absent meaning NOTSET. */
otter_status ot_conv_geom_forward_named(const ot_kernel_ctx *ctx, ot_conv_geom *g, bool ceil_mode, const char *prefix);

/* Widen nd spatial dims to 3 (leading 1s) and compute the sizes. */
void ot_conv_geom_to3(ot_conv_geom *g);

/* The window of a forward geometry (after ot_conv_geom_to3). */
ot_conv_window ot_conv_geom_window(const ot_conv_geom *g);

#endif
