/* Channel-blocked tensors: [N][C / 16][H][W][16], 16 channels of a position side by side, so a
 * vector holds one position's block of channels and a layer's kernels read and write it without
 * transposing (runtime/layout.c puts chains of such layers in this layout, with com.otter
 * FromChannelBlocks where the rest of the graph reads planar [N][C][H][W] values). */
#ifndef OTTER_RUNTIME_OPS_CHANNEL_BLOCKS_H
#define OTTER_RUNTIME_OPS_CHANNEL_BLOCKS_H

#include "runtime/op.h"

#define OT_CHANNEL_BLOCK 16

/* OTTER_OK when t, the node's input i, is float [N, C / 16, H, W, 16]; else an error naming it. */
otter_status ot_channel_blocks_check(const ot_kernel_ctx *ctx, size_t i, const otter_tensor *t);

/* A channel-blocked tensor's planar shape [N, C, H, W] over the same data (a view for the
 * geometry checks of the planar kernels: its elements are still in blocks). */
otter_tensor ot_channel_blocks_planar(const otter_tensor *t);

#endif
