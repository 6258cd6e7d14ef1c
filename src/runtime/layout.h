/* Channel-blocked layout for chains of convolutions (run by ot_fuse_model after the fusions, when the
 * CPU has AVX2 or AVX-512).
 *
 * Between layers the runtime's tensors are planar, [N][C][H][W], so every convolution kernel that
 * wants a position's channels in a vector transposes its input in and its result back out
 * (conv_lanes.c, the channel-block depthwise and pooling code). ot_layout_channel_blocks puts
 * chains of such layers into the channel-blocked layout [N][C / B][H][W][B] (runtime/ops/channel_blocks.h;
 * B = 16 on AVX-512, 8 on AVX2) instead, where each reads and writes vectors as they lie:
 *
 *   Conv / FusedConv (2-D, one group or one channel a group, W a float initializer with a multiple
 *   of B output channels, no fused pooling, a sum input only if blocked)
 *                             -> FusedConv {channel_blocks = B}: the channel-lane kernel or the
 *                                channel-block depthwise code storing blocks, reading X as it is
 *                                (blocked, or planar where the chain starts)
 *   MaxPool (Y only)          -> com.otter BlockedMaxPool, or when it alone reads a convolution's result
 *                                (no sum input) part of that FusedConv: its attributes as maxpool_<name>,
 *                                each image pooled as soon as it is convolved, while it is in cache
 *   GlobalAveragePool         -> com.otter BlockedGlobalAveragePool, writing planar [N, C, 1, 1]
 *   Concat on axis 1, Add, Mul, and the elementwise activations (Relu, Clip, Sigmoid, HardSigmoid,
 *   HardSwish, LeakyRelu, Tanh) -> themselves, on the rank-5 blocks
 *
 * all but the convolutions only over blocked values (the binary ones only with both inputs blocked:
 * two planar shapes whose channel counts are multiples of B broadcast only when the counts are equal,
 * so their blocks line up).
 *
 * Each value of a chain that anything outside it reads (another node, a subgraph, a graph output)
 * is given back under its own name by a com.otter FromChannelBlocks, so the rest of the graph is
 * unchanged. A chain is converted only when it has two convolutions or more and at least twice as
 * many blocked-to-blocked edges as FromChannelBlocks: a layer or two between planar ones would pay
 * the reorders for little. The blocked kernels sum what their planar counterparts sum, in the order
 * of the planar channel-lane and channel-block paths (the pooling and the reorders are exact); where
 * the planar graph takes another path the results differ by rounding. */
#ifndef OTTER_RUNTIME_LAYOUT_H
#define OTTER_RUNTIME_LAYOUT_H

#include <stddef.h>

#include "otter/ir.h"
#include "otter/status.h"

/* Rewrites g (top level) in place; *n_blocked counts the nodes now running on blocks. */
otter_status ot_layout_channel_blocks(otter_graph *g, size_t *n_blocked);

#endif
