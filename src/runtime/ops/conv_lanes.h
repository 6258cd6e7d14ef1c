/* Direct 2-D convolution with the output channels in the vector lanes (one group; AVX-512, and AVX2 into
 * outputs in blocks of 8 channels).
 *
 * ot_conv_direct_run puts output positions in the lanes: a row of 7 or 14 outputs fills 7 of 8 or
 * 14 of 16 of them, and its 12-channel blocks leave part of the last block empty at 64 channels,
 * so SqueezeNet's 3x3 layers at 7x7 and 14x14 ran at 130-155 GFLOP/s where the core does ~216.
 * Here a register tile is 6 output positions (any six: they may cross rows) x 64 output channels:
 * each (channel, tap) broadcasts the six inputs it reads and multiplies them by 64 weights, so the
 * lanes are full whatever the image's width and only the channel count has to fill 16s. The tiles
 * are written position-major and transposed back to planes as bias, sum and activation are
 * applied. 1x1 convolutions need no input copy and no transpose of the input (the small-image
 * product of nn_conv.c transposes both ways). With AVX2 (16 registers) a tile is 6 positions x 16
 * channels, the GEMM kernel's shape, and only channel-blocked outputs (runtime/layout.c) take it. */
#ifndef OTTER_RUNTIME_OPS_CONV_LANES_H
#define OTTER_RUNTIME_OPS_CONV_LANES_H

#include <stdbool.h>

#include "runtime/ops/conv_direct.h"

/* Whether ot_conv_lanes_run handles a (2-D, one group, no pooling, no crop; the AVX-512 path allowed by
 * ot_conv_direct_isa and at least 16 output channels, or an output in blocks of 8 and AVX2; only the geometry, the
 * counts and the layout of a are read). */
bool ot_conv_lanes_supported(const ot_conv_direct *a);

/* Whether ot_conv_lanes_run handles a and beats the other paths on it. */
bool ot_conv_lanes_pays_off(const ot_conv_direct *a);

/* y = act(conv(x, w) + bias + sum), same contract as ot_conv_direct_run (and the same bits: each
 * output sums its (channel, tap) products in the same order with one FMA each). Each element of
 * sum is read just before the same element of y is written, so y may be sum's buffer. x
 * (a->x_blocked) and sum and y (a->y_blocked) may be in blocks of a->block channels (the same bits again). */
otter_status ot_conv_lanes_run(ot_kernel_ctx *ctx, const ot_conv_direct *a);

#if defined(__GNUC__) && defined(__x86_64__)
/* y[m * ldy + p] = act(yt[p * ldt + m] + b[m] (+ z[m * ldy + p])), m < M, p < P (b NULL: + 0; act NULL:
 * none): position-major rows back to planes with the epilogue every product and convolution path
 * applies, in its order ((acc + b) + z, then act), so the same bits. z may be y. */
void ot_conv_rows_to_planes_avx512(const float *yt, int64_t ldt, int64_t M, int64_t P, const float *b, const float *z,
                                   const ot_fused_act *act, float *y, int64_t ldy);
#endif

#endif
