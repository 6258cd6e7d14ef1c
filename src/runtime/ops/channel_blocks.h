/* Channel-blocked tensors: [N][C / B][H][W][B], B channels of a position side by side (B = 16 on
 * AVX-512, 8 on AVX2: one vector), so a vector holds one position's block of channels and a layer's
 * kernels read and write it without transposing (runtime/layout.c puts chains of such layers in this
 * layout, with com.otter FromChannelBlocks where the rest of the graph reads planar [N][C][H][W]
 * values). A tensor carries its B as its last dimension. */
#ifndef OTTER_RUNTIME_OPS_CHANNEL_BLOCKS_H
#define OTTER_RUNTIME_OPS_CHANNEL_BLOCKS_H

#include "runtime/op.h"
#include "runtime/ops/conv_depthwise.h"

/* The block this CPU's kernels run (at most the direct kernel's ISA cap, ot_conv_direct_cap_isa): 16 with
 * AVX-512, 8 with AVX2 + FMA, 0 without (no blocked layout). */
int64_t ot_channel_block(void);

/* The channel-block depthwise and pooling path of block b (16: AVX-512, 8: AVX2); OT_DW_PORTABLE for
 * another b or one this CPU can't run. */
ot_dw_isa ot_channel_block_isa(int64_t b);

/* OTTER_OK when t, the node's input i, is float [N, C / B, H, W, B] with a B this CPU runs; else an
 * error naming it. */
otter_status ot_channel_blocks_check(const ot_kernel_ctx *ctx, size_t i, const otter_tensor *t);

/* A channel-blocked tensor's planar shape [N, C, H, W] over the same data (a view for the
 * geometry checks of the planar kernels: its elements are still in blocks). */
otter_tensor ot_channel_blocks_planar(const otter_tensor *t);

#endif
