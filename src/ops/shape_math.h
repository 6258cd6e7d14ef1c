/* Shape arithmetic shared by the kernels (src/runtime/ops) and shape inference (src/infer), so the
 * sizes a session allocates and the shapes inference declares come from one computation, and both
 * refuse the same inputs. Over fixed int64 sizes: inference calls these where the dims are known.
 *
 *     conv / pool windows   ot_window_axis, ot_window_transpose_axis
 *     broadcasting          ot_broadcast_dim
 *     reductions            ot_reduce_mask, ot_reduce_out_axes
 *     attention heads       ot_head_layout_axes, ot_head_layout_of_perm */
#ifndef OTTER_OPS_SHAPE_MATH_H
#define OTTER_OPS_SHAPE_MATH_H

#include <stdbool.h>
#include <stdint.h>

/* ---- convolution and pooling windows ------------------------------------------------------------ */

typedef enum ot_auto_pad {
    OT_AUTO_PAD_NOTSET,
    OT_AUTO_PAD_VALID,
    OT_AUTO_PAD_SAME_UPPER,
    OT_AUTO_PAD_SAME_LOWER
} ot_auto_pad;

/* The auto_pad attribute's value ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"); anything else
 * (or NULL) is NOTSET, as ONNX Runtime reads it. */
ot_auto_pad ot_auto_pad_from(const char *s);

typedef enum ot_window_status {
    OT_WINDOW_OK,
    OT_WINDOW_BAD_PARAM, /* kernel size, stride or dilation < 1, or a negative pad */
    OT_WINDOW_TOO_SMALL  /* the (padded) input is smaller than the dilated kernel, or the output would be < 0 */
} ot_window_status;

/* One spatial axis of a convolution or pooling window over an input of size `in`: the output size
 * (floor, or ceil_mode's rule that drops a last window starting in the end padding) and the pads.
 * *pad_begin / *pad_end hold the explicit pads on entry (NOTSET) and the effective ones on return
 * (0 for VALID, split from the total for SAME_*: the odd one at the end for SAME_UPPER). */
ot_window_status ot_window_axis(int64_t in, int64_t k, int64_t stride, int64_t dil, ot_auto_pad pad, bool ceil_mode,
                                int64_t *pad_begin, int64_t *pad_end, int64_t *out);

/* One spatial axis of a ConvTranspose over an input of size `in`: the output size and the pads
 * cropped from the full result stride * (in - 1) + output_padding + (k - 1) * dil + 1. out_shape: the
 * output_shape attribute's entry, or -1 without one; with it or SAME_*, the output is that size
 * (in * stride for SAME_*) and the pads are what the full result exceeds it by, split as auto_pad
 * says (the odd one at the beginning without explicit pads); otherwise the explicit pads
 * (*pad_begin, *pad_end on entry; has_pads) are cropped. */
ot_window_status ot_window_transpose_axis(int64_t in, int64_t k, int64_t stride, int64_t dil, int64_t output_padding,
                                          ot_auto_pad pad, int64_t out_shape, bool has_pads, int64_t *pad_begin,
                                          int64_t *pad_end, int64_t *out);

/* ---- broadcasting ----------------------------------------------------------------------------------- */

/* Multidirectional (numpy) broadcast of two aligned dimensions into *out; false when they differ
 * and neither is 1. */
static inline bool ot_broadcast_dim(int64_t a, int64_t b, int64_t *out) {
    if (a != b && a != 1 && b != 1) return false;
    *out = a == 1 ? b : a;
    return true;
}

/* ---- reductions ------------------------------------------------------------------------------------- */

/* Mark the reduced axes of a rank-`rank` input in reduced[0..rank): the given axes (negative ones
 * counted from the end), or every axis when there are none, unless noop_with_empty_axes (then none).
 * Returns -1, or the index in axes of the first one out of range. */
int64_t ot_reduce_mask(int rank, const int64_t *axes, int64_t n_axes, bool noop_with_empty_axes, bool *reduced);

/* The output axes of a reduction: src[j] is the input axis output axis j has the size of, or -1 for
 * a reduced axis kept with size 1 (keepdims). Returns the output rank. */
int ot_reduce_out_axes(int rank, const bool *reduced, bool keepdims, int *src);

/* ---- attention heads' layouts (com.otter AttentionCoreGrad, runtime/fuse.c) ------------------------- */

/* The axes on which a rank-3 operand [n, rows, cols] in layout L (0 to 3) stores n, rows and cols: 0 as it is,
 * 1 [rows, n, cols], 2 [n, cols, rows], 3 [cols, n, rows]; a Transpose with perm ot_head_layout_axes[L] of the
 * stored tensor gives the operand back. */
extern const int64_t ot_head_layout_axes[4][3];

/* The layout L (1 to 3) whose ot_head_layout_axes[L] is perm p, or 0 for any other perm. */
int ot_head_layout_of_perm(const int64_t p[3]);

#endif
