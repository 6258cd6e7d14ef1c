/* Shape arithmetic shared by kernels and shape inference (shape_math.h). */
#include "ops/shape_math.h"

#include <string.h>

ot_auto_pad ot_auto_pad_from(const char *s) {
    if (!s) return OT_AUTO_PAD_NOTSET;
    if (strcmp(s, "VALID") == 0) return OT_AUTO_PAD_VALID;
    if (strcmp(s, "SAME_UPPER") == 0) return OT_AUTO_PAD_SAME_UPPER;
    if (strcmp(s, "SAME_LOWER") == 0) return OT_AUTO_PAD_SAME_LOWER;
    return OT_AUTO_PAD_NOTSET;
}

static bool is_same(ot_auto_pad pad) { return pad == OT_AUTO_PAD_SAME_UPPER || pad == OT_AUTO_PAD_SAME_LOWER; }

ot_window_status ot_window_axis(int64_t in, int64_t k, int64_t stride, int64_t dil, ot_auto_pad pad, bool ceil_mode,
                                int64_t *pad_begin, int64_t *pad_end, int64_t *out) {
    if (pad == OT_AUTO_PAD_VALID) *pad_begin = *pad_end = 0;
    if (stride < 1 || dil < 1 || k < 1 || *pad_begin < 0 || *pad_end < 0) return OT_WINDOW_BAD_PARAM;
    int64_t ke = (k - 1) * dil + 1; /* the dilated kernel's extent */
    if (is_same(pad)) {
        int64_t o = (in + stride - 1) / stride;
        int64_t total = (o - 1) * stride + ke - in;
        if (total < 0) total = 0;
        *pad_begin = pad == OT_AUTO_PAD_SAME_UPPER ? total / 2 : total - total / 2;
        *pad_end = total - *pad_begin;
        *out = o;
        return OT_WINDOW_OK;
    }
    int64_t span = in + *pad_begin + *pad_end - ke;
    if (span < 0) return OT_WINDOW_TOO_SMALL;
    int64_t o = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
    /* a last window starting in the end padding is dropped (as onnx's reference and PyTorch do) */
    if (ceil_mode && (o - 1) * stride >= in + *pad_begin) o--;
    *out = o;
    return OT_WINDOW_OK;
}

ot_window_status ot_window_transpose_axis(int64_t in, int64_t k, int64_t stride, int64_t dil, int64_t output_padding,
                                          ot_auto_pad pad, int64_t out_shape, bool has_pads, int64_t *pad_begin,
                                          int64_t *pad_end, int64_t *out) {
    if (stride < 1 || dil < 1) return OT_WINDOW_BAD_PARAM;
    int64_t full = stride * (in - 1) + output_padding + (k - 1) * dil + 1;
    if (out_shape >= 0 || is_same(pad)) {
        int64_t target = out_shape >= 0 ? out_shape : in * stride;
        int64_t total = full - target;
        if (total < 0) total = 0; /* output larger than the full result: extra positions get the bias only */
        if (pad == OT_AUTO_PAD_SAME_UPPER) {
            *pad_begin = total / 2, *pad_end = total - total / 2;
        } else if (pad == OT_AUTO_PAD_SAME_LOWER || !has_pads) {
            *pad_begin = total - total / 2, *pad_end = total / 2;
        }
        *out = target;
    } else {
        if (pad == OT_AUTO_PAD_VALID) *pad_begin = *pad_end = 0;
        *out = full - *pad_begin - *pad_end;
    }
    return *out < 0 ? OT_WINDOW_TOO_SMALL : OT_WINDOW_OK;
}

int64_t ot_reduce_mask(int rank, const int64_t *axes, int64_t n_axes, bool noop_with_empty_axes, bool *reduced) {
    for (int i = 0; i < rank; i++) reduced[i] = n_axes == 0 && !noop_with_empty_axes;
    for (int64_t j = 0; j < n_axes; j++) {
        int64_t a = axes[j] < 0 ? axes[j] + rank : axes[j];
        if (a < 0 || a >= rank) return j;
        reduced[a] = true;
    }
    return -1;
}

int ot_reduce_out_axes(int rank, const bool *reduced, bool keepdims, int *src) {
    int r = 0;
    for (int i = 0; i < rank; i++)
        if (!reduced[i])
            src[r++] = i;
        else if (keepdims)
            src[r++] = -1;
    return r;
}

const int64_t ot_head_layout_axes[4][3] = {{0, 1, 2}, {1, 0, 2}, {0, 2, 1}, {1, 2, 0}};

int ot_head_layout_of_perm(const int64_t p[3]) {
    for (int L = 1; L < 4; L++)
        if (p[0] == ot_head_layout_axes[L][0] && p[1] == ot_head_layout_axes[L][1] && p[2] == ot_head_layout_axes[L][2])
            return L;
    return 0;
}
