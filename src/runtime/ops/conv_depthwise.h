/* Depthwise convolution (float, NCHW, 2-D or 1-D; group == C, so output channel m reads input channel
 * m / (M / C) only) and its two gradients, for Conv (nn_conv.c) and ConvGrad (training_conv.c).
 *
 * One input plane at a time is copied into a zero-padded buffer split into stride phases along both
 * axes: phase (a, b) is a QH x QW grid whose row r, column q holds padded pixel (r * sh + a,
 * q * sw + b), with QH = OH + (KH - 1) * dh / sh and QW = OW + (KW - 1) * dw / sw. Output (oh, ow)
 * at tap (kh, kw) then reads phase ((kh * dh) % sh, (kw * dw) % sw) at flat index oh * QW + ow +
 * (kh * dh / sh) * QW + kw * dw / sw. Over the "wide" output grid OH x QW every tap is one contiguous
 * run, so a plane of any size is one vector loop per tap (the QW - OW extra columns per row are
 * computed and dropped): no per-pixel bounds tests, and small late-layer planes (4 x 4) still fill
 * whole vectors. The input gradient is the same correlation run backwards per phase (dY widened,
 * zero-padded, read at negated offsets), the weight gradient one dot product per tap.
 *
 * The vector loops exist for AVX-512, AVX2 + FMA and portable C; ot_conv_depthwise_isa picks the best
 * the CPU runs, and a plan can be made for any of them the CPU supports (tests run each). */
#ifndef OTTER_RUNTIME_OPS_CONV_DEPTHWISE_H
#define OTTER_RUNTIME_OPS_CONV_DEPTHWISE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/ops/fused_act.h"
#include "runtime/ops/im2col.h"

typedef enum { OT_DW_PORTABLE, OT_DW_AVX2, OT_DW_AVX512 } ot_dw_isa;

#define OT_DW_MAX_TAPS 121 /* kernels up to 11 x 11 and strides up to 11 x 11 (others take the general paths) */

typedef struct ot_dw_plan {
    ot_dw_isa isa;
    int64_t H, W, OH, OW, sh, sw, ph, pw; /* ph, pw: pads at the beginning */
    int64_t QH, QW, phases, grid;         /* grid = QH * QW floats per phase */
    int64_t wide;                         /* OH * QW outputs, rounded up to whole vectors */
    int64_t taps;                         /* KH * KW */
    int64_t off[OT_DW_MAX_TAPS];          /* per tap (kh, kw): offset of its run in the phase buffer */
    int64_t in_floats;                    /* the phase buffer with the slack the vector loops read */
    bool dx_covered;                      /* every input pixel lies in a phase some tap reads */
    /* per row phase a: grid rows [row_lo, row_hi) hold input rows; per column phase b, columns [col_lo, col_hi) */
    int64_t row_lo[OT_DW_MAX_TAPS], row_hi[OT_DW_MAX_TAPS], col_lo[OT_DW_MAX_TAPS], col_hi[OT_DW_MAX_TAPS];
    /* the taps grouped by phase (the input gradient's loops): tap order[i] for i in [first[p], first[p + 1]) */
    int64_t order[OT_DW_MAX_TAPS], first[OT_DW_MAX_TAPS + 1]; /* first: per phase, phases + 1 used */
    /* the channel-block forward: the padded extent Hp x Wp it reads, per tap its offset in positions,
     * channels a block and the floats of its buffers (the padded input; a block's weights and bias) */
    int64_t Hp, Wp, boff[OT_DW_MAX_TAPS], block, blk_in, blk_w;
    /* the flat channel-block forward (see ot_conv_depthwise_forward_block): chunks of 16 outputs a
     * plane, per tap the offset of its input from the output's flat index, the floats of the masks */
    bool flat;
    int64_t chunks, foff[OT_DW_MAX_TAPS], blk_masks;
} ot_dw_plan;

/* The best vector loops this CPU runs, and whether it runs isa. */
ot_dw_isa ot_conv_depthwise_isa(void);
bool ot_conv_depthwise_isa_supported(ot_dw_isa isa);

/* Fills p for window w (2-D in its last two axes, as ot_conv_geom_window makes it; non-negative pads);
 * false when the geometry is not one this kernel takes (3-D, more taps than OT_DW_MAX_TAPS). */
bool ot_conv_depthwise_plan(ot_dw_plan *p, const ot_conv_window *w, ot_dw_isa isa);

/* The scratch of the calls below: zero it (floats of it) once, then reuse it for any number of calls
 * with the same plan (and Mg): they write only what changes from plane to plane, and the padding
 * stays zero. */
void ot_conv_depthwise_init(float *scratch, int64_t floats);

/* Floats of scratch ot_conv_depthwise_forward needs (64-byte aligned). */
int64_t ot_conv_depthwise_forward_scratch(const ot_dw_plan *p);

/* y[m] = conv(x, w[m]) for the Mg output channels of one input plane: x [H][W], w [Mg][KH][KW],
 * y [Mg][OH][OW]. No bias: Conv's epilogue adds it. */
void ot_conv_depthwise_forward(const ot_dw_plan *p, const float *x, const float *w, int64_t Mg, float *y,
                               float *scratch);

/* The channel-block forward (channel multiplier 1): one image's planes of a block of channels (16 on
 * AVX-512, 8 on AVX2, 4 portable: p->block) are transposed into a zero-padded [Hp][Wp][block] buffer,
 * so every tap of an output position is one vector of the block's channels. Each output is bias + the
 * taps' products; a block-sized run of positions at a time gets Z added and the fused activation
 * (Relu and Clip without Z in registers, the others over the run in L1) and is transposed back into
 * the planes. For mobile nets' depthwise layers it beats the plane-at-a-time path above on every map
 * size with AVX2 and AVX-512, most on the late small maps (2x2 to 8x8) where that path's per-plane
 * overheads and padded vectors dominate.
 *
 * With AVX-512, stride 1, an output as wide as the input, planes of at least 64 outputs and up to 9
 * taps (p->flat), the block's planes are read where they are instead: with the output that wide, tap
 * t of output flat index j reads input j + foff[t], so 16 consecutive outputs of a plane are 16
 * consecutive inputs, loaded under a mask of the lanes whose input lies in the plane (precomputed
 * per tap and chunk of 16 outputs). No transposes, no padded copy; the same sums in the same order
 * (bias, then the taps in order), so the same bits as the transposing path. */

/* Floats of scratch the channel-block calls below need (64-byte aligned), one per thread; prepare it
 * with ot_conv_depthwise_block_init once for any number of calls with the same plan. */
int64_t ot_conv_depthwise_block_scratch(const ot_dw_plan *p);
void ot_conv_depthwise_block_init(const ot_dw_plan *p, float *scratch);

/* Whether the channel-block forward is the faster one for p's layer. */
bool ot_conv_depthwise_block_pays_off(const ot_dw_plan *p);

/* Packs the weights w [nc][KH][KW] and bias b [nc] (NULL: none) of nc <= p->block channels into wb
 * (p->blk_w floats, 64-byte aligned): a block's packed weights, read by the calls below. */
void ot_conv_depthwise_block_weights(const ot_dw_plan *p, const float *w, const float *b, int64_t nc, float *wb);

/* y [nc][OH][OW] = act(conv(x [nc][H][W]) + b (+ z [nc][OH][OW])) for the nc channels whose weights
 * wb holds; z and act may be NULL. y may be z's buffer (each element of z is read just before the
 * same element of y is written). */
void ot_conv_depthwise_forward_block(const ot_dw_plan *p, const float *x, const float *z, const ot_fused_act *act,
                                     int64_t nc, float *y, const float *wb, float *scratch);

/* The same forward into a channel-blocked block y [OH][OW][block] (runtime/ops/channel_blocks.h; p->block
 * channels), from x channel-blocked [H][W][block] (x_blocked) or planar block planes [block][H][W], z
 * channel-blocked like y or NULL; the same bits as ot_conv_depthwise_forward_block. */
void ot_conv_depthwise_forward_blocked(const ot_dw_plan *p, const float *x, bool x_blocked, const float *z,
                                       const ot_fused_act *act, float *y, const float *wb, float *scratch);

/* Max pooling over the same channel blocks, for MaxPool without indices (a plan of the pooling
 * window: the taps are the window, dilation included): y [nc][OH][OW] = the maximum of each window of
 * x [nc][H][W]. Taps in row-major order, each replacing the running maximum only when greater (from
 * -inf), as MaxPool's scalar loops: the same bits (the first of equal maxima, NaN never wins). The
 * planes of the block are consecutive (x + c * H * W, y + c * OH * OW), so a block may span images.
 * scratch: ot_conv_depthwise_block_scratch floats, its input buffer first filled by
 * ot_conv_depthwise_block_max_init (the padding never written after, so it stays -inf) for any
 * number of calls with the same plan. */
void ot_conv_depthwise_block_max_init(const ot_dw_plan *p, float *scratch);
void ot_conv_depthwise_block_maxpool(const ot_dw_plan *p, const float *x, int64_t nc, float *y, float *scratch);
/* The same over one block of channel-blocked data (runtime/ops/channel_blocks.h; p->block channels):
 * y [OH][OW][block] = the window maxima of x [H][W][block]. */
void ot_conv_depthwise_block_maxpool_blocked(const ot_dw_plan *p, const float *x, float *y, float *scratch);
/* The same with MaxPool's second output: ind [nc][OH][OW] = the flat index of each maximum,
 * (plane0 + c) * H * W + its offset in plane c of the block (row-major indices, plane0 the block's
 * first plane counted over the whole tensor). Each window starts from its first tap inside the
 * image, so ties and NaN go as MaxPool's scalar loop with indices: the first of equal maxima, a NaN
 * kept once taken; a window wholly in the padding gives -inf at offset 0. */
void ot_conv_depthwise_block_maxpool_indices(const ot_dw_plan *p, const float *x, int64_t nc, int64_t plane0, float *y,
                                             int64_t *ind, float *scratch);

/* Floats of scratch ot_conv_depthwise_backward needs (64-byte aligned). */
int64_t ot_conv_depthwise_backward_scratch(const ot_dw_plan *p, int64_t Mg);

/* The gradients for one input channel over a batch of N images: x [N][xstride] (the channel's plane
 * at x + n * xstride), dy [N][dystride] (its Mg output planes at dy + n * dystride), w [Mg][KH][KW].
 * dx (may be NULL): the channel's planes at dx + n * xstride, written. dw (may be NULL): [Mg][KH][KW],
 * written. */
void ot_conv_depthwise_backward(const ot_dw_plan *p, int64_t N, const float *x, int64_t xstride, const float *dy,
                                int64_t dystride, const float *w, int64_t Mg, float *dx, float *dw, float *scratch);

#endif
