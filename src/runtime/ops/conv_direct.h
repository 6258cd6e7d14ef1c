/* Direct 2-D convolution (float, NCHW) for every kernel but a plain 1x1 (already a matrix
 * product), without im2col.
 *
 * The input is copied once into a zero-padded buffer (split into stride phases along W, so that
 * eight neighbouring outputs always read eight neighbouring inputs), and an AVX2/FMA register
 * tile of up to 6 output channels x 16 output positions (AVX-512: 12 x 32) accumulates over every
 * (channel, tap) straight from that buffer. Bias, a sum input, the fused activation and a 2x2 max pooling are
 * applied as the tile is stored. Used by Conv (nn.c) and by ConvGrad's input gradient (training_nn.c); hands 3x3
 * convolutions to Winograd (conv_winograd.c) where that is allowed and pays off. */
#ifndef OTTER_RUNTIME_OPS_CONV_DIRECT_H
#define OTTER_RUNTIME_OPS_CONV_DIRECT_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/op.h"
#include "runtime/ops/fused_act.h"
#include "runtime/ops/im2col.h"

typedef struct ot_conv_direct {
    const float *x;    /* [N][C][H][W] */
    const float *w;    /* [M][C / group][KH][KW] */
    const float *bias; /* [M], or NULL */
    const float *sum;  /* shaped like y, added before the activation, or NULL */
    float *y;          /* [N][M][OH][OW] */
    int64_t N, C, M, group;
    ot_conv_window win; /* 2-D geometry in the last two axes: in[0] == out[0] == k[0] == 1; a negative
                           pad_begin crops (ConvGrad's input gradient uses that) */
    ot_fused_act act;   /* Relu in registers as the tile is stored; the others on each stored run of outputs */
    bool maxpool_2x2;   /* (act none or Relu) then MaxPool 2x2, stride 2, floor: y is [N][M][OH / 2][OW / 2] */
    int64_t *indices;   /* with maxpool_2x2, or NULL: MaxPool's Indices, shaped like y (flat positions in the
                           unpooled [N][M][OH][OW], the first maximum of each window in scan order) */
    int winograd;       /* the largest Winograd output tile it may use where that pays off: 0 (none), 2 or 4
                           (ctx->winograd) */
    bool constant_w;    /* w is the same every run: its packed forms are kept in the node's cache */
    bool x_blocked;     /* x in blocks of `block` channels, [N][C / block][H][W][block] (conv_lanes.c only, C a
                           multiple of block) */
    bool y_blocked;     /* sum and y in blocks of `block` channels, [N][M / block][OH][OW][block] (conv_lanes.c
                           only, M a multiple of block) */
    int64_t block;      /* with x_blocked or y_blocked: 16 (the AVX-512 tiles) or 8 (the AVX2 tiles) */
    /* conv_lanes.c only, or NULL: the output channels in n_parts parts of OT_CONV_PART_INTS each (channels,
       rows, columns, first row, first column), each a convolution by its own weights part_w[q] ([channels][C]
       [rows][columns]) and bias part_b[q] (or NULL) placed at that window of the win.k kernel (a Concat of
       convolutions of one input, fuse.c); w and bias are not read. Each part reads only its window, so the
       result is the separate convolutions' to the bit. */
    const int64_t *parts;
    int64_t n_parts;
    const float *const *part_w, *const *part_b;
    /* conv_lanes.c with y_blocked and no sum only, or NULL: MaxPool by this channel-block plan follows (a
       FusedConv's maxpool_ attributes, runtime/layout.c), its result [N][M / block][PH][PW][block] in pooled and y
       not written. Images convolved one by one are pooled each as it is done, while it is in cache. */
    const struct ot_dw_plan *pool;
    float *pooled;
} ot_conv_direct;

#define OT_CONV_PART_INTS 5
#define OT_CONV_MAX_PARTS 8

/* The direct kernel's vector paths: AVX2 + FMA register tiles of 6 channels x 16 positions, AVX-512
 * tiles of 12 channels x 32 positions. */
typedef enum { OT_CONV_ISA_NONE, OT_CONV_ISA_AVX2, OT_CONV_ISA_AVX512 } ot_conv_isa;

/* The best path this CPU runs, at most the cap (tests force each path with it; process-wide). */
ot_conv_isa ot_conv_direct_isa(void);
void ot_conv_direct_cap_isa(ot_conv_isa cap);

/* Whether ot_conv_direct_run handles this geometry on this CPU (2-D or 1-D, AVX2 + FMA). */
bool ot_conv_direct_supported(const ot_conv_window *w);

/* y = act(conv(x, w) + bias + sum). Scratch comes from ctx (planned into the arena); runs on the
 * session's threads. Fails only with OTTER_ERR_NOMEM. */
otter_status ot_conv_direct_run(ot_kernel_ctx *ctx, const ot_conv_direct *a);

/* OT_CONV_FORM_DIRECT(_AVX512): the direct kernel's channel blocks of each path; OT_CONV_FORM_GEMM_B:
 * W^T as the packed B of ot_sgemm_prepacked (nn_conv.c's small-image path). */
enum {
    OT_CONV_FORM_DIRECT,
    OT_CONV_FORM_DIRECT_AVX512,
    OT_CONV_FORM_WINOGRAD2,
    OT_CONV_FORM_WINOGRAD4,
    OT_CONV_FORM_GEMM_B,
    OT_CONV_FORM_LANES,     /* conv_lanes.c's blocks of 64 channels */
    OT_CONV_FORM_DEPTHWISE, /* the channel-block depthwise code's blocks (nn_conv.c) */
    OT_CONV_FORMS
};

/* Room for the weights in packed form `form` (OT_CONV_FORM_*), n floats: kept in the node's
 * cache when a->constant_w (*fill false once they are there), else scratch (*fill true). NULL
 * (error set) when out of memory. */
float *ot_conv_packed_weights(ot_kernel_ctx *ctx, const ot_conv_direct *a, int form, size_t n, bool *fill);

/* ---- shared by the direct and Winograd kernels (x86-64 only) ---------------------------------- */

#define OT_CONV_MR        6  /* output channels per register tile */
#define OT_CONV_PAD_SLACK 16 /* zeroed floats after a padded input: vector reads run past a row's end */

/* A zero-padded copy of x [N][C][H][W]: per image, PH padded rows (padded row r is input row
 * r - pad_h), each holding every channel's `phases` column phases of QW columns, where phase s,
 * column q is padded column q * phases + s (input column q * phases + s - pad_w). Negative pads
 * crop. row = C * phases * QW and image = PH * row floats. */
typedef struct ot_conv_pad {
    const float *x;
    float *xp;
    int64_t C, H, W, pad_h, pad_w, phases, PH, QW, row, image;
} ot_conv_pad;

/* ot_parallel_for body over units [u0, u1) = image * PH + padded row (arg: ot_conv_pad). */
void ot_conv_pad_rows(void *arg, int64_t u0, int64_t u1);

/* Cut M channels into register-tile blocks of OT_CONV_MR, using two blocks of 4 rather than a
 * block of 2 (the 4-row tile keeps more accumulators busy); m0 / mr get M / 4 + 2 entries at most.
 * Returns the number of blocks. */
int ot_conv_channel_blocks(int64_t M, int64_t *m0, int *mr);

/* Winograd F(T x T, 3x3), T = 2 or 4, for 3x3, stride 1, dilation 1, one group (conv_winograd.c);
 * same contract as ot_conv_direct_run, which calls it with T = ot_conv_winograd_tile(a, threads)
 * when that is not 0. */
int ot_conv_winograd_tile(const ot_conv_direct *a, int n_threads);
otter_status ot_conv_winograd_run(ot_kernel_ctx *ctx, const ot_conv_direct *a, int T);

#endif
